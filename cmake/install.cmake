# Packaging: the embeddable libraries, `cmake --install`, the CMake package and tandem.pc.
#
#   tandem::tandem         libtandem.so: C API (tandem/tandem.h) + C++ API (tandem/engine.hpp);
#                          its dependencies (spdlog, PCRE2, Boost.JSON, Threads) linked privately.
#   tandem::tandem_static  libtandem.a: the same objects; consumers also link those deps
#                          (the installed package config finds them with COMPONENTS static).
#
# Both are built from the objects of tandem_kernels and of every library component
# (tandem_component in cmake/components.cmake records them), which the CLI, tests and
# benchmarks keep linking directly. A helper library added under kernels/ some other way is
# not picked up: add its objects to _tandem_objects below. Included from the root
# CMakeLists.txt after every add_subdirectory, so all targets exist.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# ---- one version, written in three places --------------------------------------------
foreach(_hdr include/tandem/version.hpp include/tandem/tandem.h)
  file(STRINGS "${PROJECT_SOURCE_DIR}/${_hdr}" _line REGEX "^#define TANDEM_VERSION_STRING ")
  if(NOT _line MATCHES "\"${PROJECT_VERSION}\"")
    message(FATAL_ERROR "${_hdr}: TANDEM_VERSION_STRING does not match project(VERSION ${PROJECT_VERSION})")
  endif()
endforeach()

# ---- symbol visibility ----------------------------------------------------------------
# Library code exports only what TANDEM_API marks. Static users (CLI, tests) are unaffected:
# visibility only matters to the dynamic symbol table.
get_property(_tandem_components GLOBAL PROPERTY TANDEM_COMPONENTS)
# The backends: the CPU one (tandem_kernels) and the CUDA one's libraries (kernels/cuda/).
set(_tandem_library_targets tandem_kernels tandem_backends tandem_cuda_arena)
if(TARGET tandem_cuda_emulated)
  list(APPEND _tandem_library_targets tandem_cuda_emulated)
endif()
if(TARGET tandem_cuda_device)
  list(APPEND _tandem_library_targets tandem_cuda_device)
endif()
list(APPEND _tandem_library_targets ${_tandem_components})
set_target_properties(tandem_kernels PROPERTIES
  C_VISIBILITY_PRESET hidden
  CXX_VISIBILITY_PRESET hidden
  CUDA_VISIBILITY_PRESET hidden
  VISIBILITY_INLINES_HIDDEN ON)

set(_tandem_objects "")
foreach(_tgt IN LISTS _tandem_library_targets)
  list(APPEND _tandem_objects $<TARGET_OBJECTS:${_tgt}>)
endforeach()
set(_tandem_public_includes
  $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
  $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)

# ---- dependencies of the library code ------------------------------------------------
# Whatever the library targets link (minus our own targets), so a dependency added to any
# of them reaches both libraries. For each, how a consumer of libtandem.a
# finds it again (tandemConfig.cmake) and what tandem.pc lists for static linking.
set(TANDEM_LIB_DEPENDENCIES "")
set(TANDEM_CONFIG_DEPENDENCIES "")  # lines of tandemConfig.cmake (see _tandem_dep there)
set(TANDEM_PC_REQUIRES_PRIVATE "")
set(TANDEM_PC_LIBS_PRIVATE "")
foreach(_tgt IN LISTS _tandem_library_targets)
  get_target_property(_libs ${_tgt} LINK_LIBRARIES)
  foreach(_lib IN LISTS _libs)
    if(_lib MATCHES "^tandem_" OR _lib IN_LIST TANDEM_LIB_DEPENDENCIES)
      continue()
    endif()
    list(APPEND TANDEM_LIB_DEPENDENCIES ${_lib})
    if(_lib STREQUAL "Threads::Threads")
      string(APPEND TANDEM_CONFIG_DEPENDENCIES "_tandem_dep(Threads)\n")
      list(APPEND TANDEM_PC_LIBS_PRIVATE -pthread)
    elseif(_lib STREQUAL "spdlog::spdlog")
      string(APPEND TANDEM_CONFIG_DEPENDENCIES "_tandem_dep(spdlog)\n")
      list(APPEND TANDEM_PC_REQUIRES_PRIVATE spdlog)
    elseif(_lib STREQUAL "fmt::fmt")
      string(APPEND TANDEM_CONFIG_DEPENDENCIES "_tandem_dep(fmt)\n")
      list(APPEND TANDEM_PC_REQUIRES_PRIVATE fmt)
    elseif(_lib STREQUAL "PkgConfig::PCRE2")
      string(APPEND TANDEM_CONFIG_DEPENDENCIES "_tandem_pkg(PCRE2 libpcre2-8)\n")
      list(APPEND TANDEM_PC_REQUIRES_PRIVATE libpcre2-8)
    elseif(_lib MATCHES "^Boost::(.+)$")
      string(APPEND TANDEM_CONFIG_DEPENDENCIES "_tandem_dep(Boost COMPONENTS ${CMAKE_MATCH_1})\n")
      list(APPEND TANDEM_PC_LIBS_PRIVATE -lboost_${CMAKE_MATCH_1})
    elseif(_lib MATCHES "^CUDA::(.+)$")  # the CUDA backend, when built
      string(APPEND TANDEM_CONFIG_DEPENDENCIES "_tandem_dep(CUDAToolkit)\n")
      list(APPEND TANDEM_PC_LIBS_PRIVATE -l${CMAKE_MATCH_1})
    elseif(_lib MATCHES "^OpenMP::")
      string(APPEND TANDEM_CONFIG_DEPENDENCIES "_tandem_dep(OpenMP)\n")
      list(APPEND TANDEM_PC_LIBS_PRIVATE -fopenmp)
    elseif(NOT _lib MATCHES "::" AND NOT TARGET ${_lib} AND NOT _lib MATCHES "[$<>]")
      list(APPEND TANDEM_PC_LIBS_PRIVATE -l${_lib})  # a plain system library such as m or dl
    else()
      message(WARNING "cmake/install.cmake: ${_tgt} links ${_lib}; say there how consumers of "
                      "tandem::tandem_static find it, or the installed static package cannot link")
    endif()
  endforeach()
endforeach()
list(APPEND TANDEM_PC_LIBS_PRIVATE -lstdc++ -lm)
list(REMOVE_DUPLICATES TANDEM_PC_LIBS_PRIVATE)
list(JOIN TANDEM_PC_REQUIRES_PRIVATE " " TANDEM_PC_REQUIRES_PRIVATE)
list(JOIN TANDEM_PC_LIBS_PRIVATE " " TANDEM_PC_LIBS_PRIVATE)

# ---- libtandem.so ---------------------------------------------------------------------
add_library(tandem_shared SHARED ${_tandem_objects})
add_library(tandem::tandem ALIAS tandem_shared)
set_target_properties(tandem_shared PROPERTIES
  OUTPUT_NAME tandem
  EXPORT_NAME tandem
  LINKER_LANGUAGE CXX
  VERSION ${PROJECT_VERSION}
  # Before 1.0 a minor release may change the ABI, so the soname carries major.minor.
  SOVERSION ${PROJECT_VERSION_MAJOR}.${PROJECT_VERSION_MINOR}
  LINK_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/tandem.map)
target_include_directories(tandem_shared INTERFACE ${_tandem_public_includes})
target_compile_features(tandem_shared INTERFACE cxx_std_20)  # for the C++ API only
target_link_libraries(tandem_shared PRIVATE ${TANDEM_LIB_DEPENDENCIES})
target_link_options(tandem_shared PRIVATE "LINKER:--version-script=${CMAKE_CURRENT_LIST_DIR}/tandem.map")
if(NOT TANDEM_SANITIZE AND NOT TANDEM_FUZZ AND NOT TANDEM_TSAN)
  # Every symbol resolved at link time: a missing dependency fails here, not in a user's program.
  # (Not in the sanitizer builds: with clang the sanitizer runtimes come with the executable,
  # so a shared library leaves their symbols to it.)
  target_link_options(tandem_shared PRIVATE "LINKER:--no-undefined")
endif()

# ---- libtandem.a ----------------------------------------------------------------------
add_library(tandem_static STATIC ${_tandem_objects})
add_library(tandem::tandem_static ALIAS tandem_static)
set_target_properties(tandem_static PROPERTIES
  OUTPUT_NAME tandem
  EXPORT_NAME tandem_static
  LINKER_LANGUAGE CXX)
target_include_directories(tandem_static INTERFACE ${_tandem_public_includes})
target_compile_features(tandem_static INTERFACE cxx_std_20)
# PRIVATE on a static library still reaches consumers as $<LINK_ONLY:...>.
target_link_libraries(tandem_static PRIVATE ${TANDEM_LIB_DEPENDENCIES})

# An instrumented library needs the sanitizer runtimes in every program that links it.
set(TANDEM_PC_EXTRA_LIBS "")
if(TANDEM_SANITIZE)
  set(_tandem_sanitizer_link -fsanitize=address,undefined)
  if(CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    # clang's UBSan checks on C++ (vptr, function types) live in its C++ runtime, which the C
    # compiler driver leaves out unless asked; that runtime needs libstdc++'s type info.
    list(APPEND _tandem_sanitizer_link -fsanitize-link-c++-runtime -lstdc++)
  endif()
  target_link_options(tandem_shared PUBLIC ${_tandem_sanitizer_link})
  target_link_options(tandem_static INTERFACE ${_tandem_sanitizer_link})
  list(JOIN _tandem_sanitizer_link " " TANDEM_PC_EXTRA_LIBS)
endif()

# ---- install --------------------------------------------------------------------------
set(TANDEM_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/tandem)
install(TARGETS tandem_shared EXPORT tandemTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS tandem_static EXPORT tandemStaticTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
if(TARGET tandem)  # the CLI (apps/)
  install(TARGETS tandem RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/tandem
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
  FILES_MATCHING PATTERN "*.h" PATTERN "*.hpp")
install(EXPORT tandemTargets NAMESPACE tandem:: DESTINATION ${TANDEM_CMAKE_DIR})
install(EXPORT tandemStaticTargets NAMESPACE tandem:: DESTINATION ${TANDEM_CMAKE_DIR})

configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/tandemConfig.cmake.in
  ${PROJECT_BINARY_DIR}/tandemConfig.cmake
  INSTALL_DESTINATION ${TANDEM_CMAKE_DIR})
# Before 1.0 only the same minor version is compatible (see SOVERSION).
write_basic_package_version_file(${PROJECT_BINARY_DIR}/tandemConfigVersion.cmake
  VERSION ${PROJECT_VERSION}
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/tandemConfig.cmake ${PROJECT_BINARY_DIR}/tandemConfigVersion.cmake
  DESTINATION ${TANDEM_CMAKE_DIR})

# tandem.pc finds its prefix relative to itself (${pcfiledir}), so the installed tree can
# be moved, and `cmake --install --prefix` elsewhere gives a correct file.
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}" OR IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
  set(TANDEM_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
  set(TANDEM_PC_LIBDIR "${CMAKE_INSTALL_FULL_LIBDIR}")
  set(TANDEM_PC_INCLUDEDIR "${CMAKE_INSTALL_FULL_INCLUDEDIR}")
else()
  file(RELATIVE_PATH _up "/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/")
  string(REGEX REPLACE "/$" "" _up "${_up}")
  set(TANDEM_PC_PREFIX "\${pcfiledir}/${_up}")
  set(TANDEM_PC_LIBDIR "\${prefix}/${CMAKE_INSTALL_LIBDIR}")
  set(TANDEM_PC_INCLUDEDIR "\${prefix}/${CMAKE_INSTALL_INCLUDEDIR}")
endif()
configure_file(${CMAKE_CURRENT_LIST_DIR}/tandem.pc.in ${PROJECT_BINARY_DIR}/tandem.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/tandem.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

# ---- tests ----------------------------------------------------------------------------
if(TANDEM_BUILD_TESTS)
  # tandem.h must stay plain C: compile it as strict C99 on every build.
  add_library(tandem_c_header_check OBJECT ${PROJECT_SOURCE_DIR}/tests/install/c_header_check.c)
  target_include_directories(tandem_c_header_check PRIVATE ${PROJECT_SOURCE_DIR}/include)
  set_target_properties(tandem_c_header_check PROPERTIES C_STANDARD 99 C_STANDARD_REQUIRED ON C_EXTENSIONS OFF)
  target_compile_options(tandem_c_header_check PRIVATE -Wall -Wextra -Wpedantic -Werror)

  # Writes the tiny model the installed examples run on (no download needed).
  add_executable(tandem_make_fixture ${PROJECT_SOURCE_DIR}/tests/install/make_fixture.cpp)
  target_link_libraries(tandem_make_fixture PRIVATE tandem_test_support tandem_options)

  if(NOT PKG_CONFIG_EXECUTABLE)
    set(PKG_CONFIG_EXECUTABLE pkg-config)
  endif()
  add_test(NAME install.examples
    COMMAND bash ${PROJECT_SOURCE_DIR}/tests/install/run_install_test.sh)
  set_tests_properties(install.examples PROPERTIES
    TIMEOUT 300
    ENVIRONMENT "TANDEM_BUILD_DIR=${PROJECT_BINARY_DIR};TANDEM_SOURCE_DIR=${PROJECT_SOURCE_DIR};TANDEM_FIXTURE_TOOL=$<TARGET_FILE:tandem_make_fixture>;TANDEM_CMAKE=${CMAKE_COMMAND};TANDEM_GENERATOR=${CMAKE_GENERATOR};TANDEM_MAKE_PROGRAM=${CMAKE_MAKE_PROGRAM};TANDEM_CC=${CMAKE_C_COMPILER};TANDEM_CXX=${CMAKE_CXX_COMPILER};TANDEM_PKG_CONFIG=${PKG_CONFIG_EXECUTABLE};TANDEM_BUILD_TYPE=$<CONFIG>")
endif()
