# One static library per component of the library code (engine/<folder>/, draft/, verify/,
# policies/): tandem_component(<target> DIRS <folders> [DEPS <targets>] [PRIVATE_DEPS ...]).
# DEPS are the components (and external libraries) below it that its headers need; a
# component links only what lies below it in the layer order of docs/architecture.md, which
# scripts/check_layers.py enforces on the includes (the `architecture.layers` test).
# Every component is recorded for the embeddable libraries (cmake/install.cmake).
function(tandem_component name)
  cmake_parse_arguments(C "" "" "DIRS;DEPS;PRIVATE_DEPS" ${ARGN})
  set(sources "")
  foreach(dir IN LISTS C_DIRS)
    file(GLOB found CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/${dir}/*.cpp)
    list(APPEND sources ${found})
  endforeach()
  add_library(${name} STATIC ${sources})
  target_include_directories(${name} PUBLIC ${PROJECT_SOURCE_DIR} ${PROJECT_SOURCE_DIR}/include)
  target_link_libraries(${name} PUBLIC ${C_DEPS} PRIVATE tandem_options ${C_PRIVATE_DEPS})
  # Library code exports only what TANDEM_API marks (see cmake/install.cmake).
  set_target_properties(${name} PROPERTIES
    C_VISIBILITY_PRESET hidden
    CXX_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON)
  set_property(GLOBAL APPEND PROPERTY TANDEM_COMPONENTS ${name})
endfunction()
