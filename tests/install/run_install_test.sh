#!/usr/bin/env bash
# Install test (ctest: install.examples, registered by cmake/install.cmake).
# Installs this build into a temporary prefix, then builds examples/c and examples/cpp
# against the INSTALLED package only — CMake find_package (shared and static) and
# pkg-config — runs each on a tiny fixture model, and checks they all print the same
# greedy text and counts. Needs no network. The environment comes from ctest:
#   TANDEM_BUILD_DIR TANDEM_SOURCE_DIR TANDEM_FIXTURE_TOOL TANDEM_CMAKE TANDEM_GENERATOR
#   TANDEM_MAKE_PROGRAM TANDEM_CC TANDEM_CXX TANDEM_PKG_CONFIG TANDEM_BUILD_TYPE
set -euo pipefail

work=$(mktemp -d "${TMPDIR:-/tmp}/tandem-install-test.XXXXXX")
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix
step() { echo "== $*"; }
die() { echo "FAIL: $*" >&2; exit 1; }
# Runs a command quietly, showing its log only when it fails.
quiet() {
  local log=$1; shift
  "$@" >"$log" 2>&1 || { cat "$log" >&2; die "$*"; }
}

step "install into $prefix"
quiet "$work/install.log" "$TANDEM_CMAKE" --install "$TANDEM_BUILD_DIR" --prefix "$prefix" --config "${TANDEM_BUILD_TYPE:-Release}"
for f in include/tandem/tandem.h include/tandem/engine.hpp include/tandem/export.h; do
  [[ -f $prefix/$f ]] || die "missing $f"
done
so=$(find "$prefix" -name 'libtandem.so' | head -n1)
[[ -n $so ]] || die "libtandem.so not installed"
libdir=$(dirname "$so")
[[ -f $libdir/libtandem.a ]] || die "libtandem.a not installed"
[[ -f $libdir/pkgconfig/tandem.pc ]] || die "tandem.pc not installed"
[[ -f $libdir/cmake/tandem/tandemConfig.cmake && -f $libdir/cmake/tandem/tandemConfigVersion.cmake ]] ||
  die "CMake package files not installed"

step "fixture model"
model=$work/tiny.gguf
"$TANDEM_FIXTURE_TOOL" "$model"

build_example() {  # name source-dir [cmake args...]
  local name=$1 src=$2; shift 2
  step "build $name against the installed package"
  quiet "$work/$name.configure.log" "$TANDEM_CMAKE" -S "$src" -B "$work/$name" -G "$TANDEM_GENERATOR" \
    -DCMAKE_MAKE_PROGRAM="$TANDEM_MAKE_PROGRAM" -DCMAKE_C_COMPILER="$TANDEM_CC" -DCMAKE_CXX_COMPILER="$TANDEM_CXX" \
    -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix" "$@"
  quiet "$work/$name.build.log" "$TANDEM_CMAKE" --build "$work/$name"
}
run_example() {  # name exe args...: stdout to $work/name.out
  local name=$1; shift
  step "run $name"
  "$@" >"$work/$name.out" 2>"$work/$name.err" || { cat "$work/$name.err" >&2; die "$name exited with $?"; }
  # spdlog's default logger writes to stdout: drop its lines ("[date time] [level] ...").
  sed -i '/^\[[0-9]\{4\}-[0-9-]* [0-9:.]*\] \[[a-z]*\] /d' "$work/$name.out"
  grep -q '^finish: length, 12 tokens$' "$work/$name.out" || { cat "$work/$name.out" >&2; die "$name: unexpected output"; }
}

build_example c "$TANDEM_SOURCE_DIR/examples/c"
run_example c "$work/c/tandem_example_c" "$model" "Hello" 12

build_example cpp "$TANDEM_SOURCE_DIR/examples/cpp"
run_example cpp "$work/cpp/tandem_example_cpp" "$model" "Hello" 12

build_example cpp-static "$TANDEM_SOURCE_DIR/examples/cpp" -DTANDEM_EXAMPLE_STATIC=ON
if readelf -d "$work/cpp-static/tandem_example_cpp" | grep -q 'libtandem\.so'; then
  die "the static build links libtandem.so"
fi
run_example cpp-static "$work/cpp-static/tandem_example_cpp" "$model" "Hello" 12

step "build c with pkg-config"
export PKG_CONFIG_PATH=$libdir/pkgconfig
flags=$("$TANDEM_PKG_CONFIG" --cflags --libs tandem) || die "pkg-config --cflags --libs tandem"
[[ $("$TANDEM_PKG_CONFIG" --modversion tandem) == "$(sed -n 's/^#define TANDEM_VERSION_STRING "\(.*\)"/\1/p' "$prefix/include/tandem/tandem.h")" ]] ||
  die "tandem.pc version differs from tandem.h"
# shellcheck disable=SC2086  # pkg-config output is a list of flags
quiet "$work/pkgconfig.build.log" "$TANDEM_CC" "$TANDEM_SOURCE_DIR/examples/c/main.c" $flags -o "$work/c-pkgconfig"
LD_LIBRARY_PATH=$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} run_example c-pkgconfig "$work/c-pkgconfig" "$model" "Hello" 12

step "same text and counts from every build"
for other in cpp cpp-static c-pkgconfig; do
  cmp -s "$work/c.out" "$work/$other.out" || { diff "$work/c.out" "$work/$other.out" >&2 || true; die "c and $other differ"; }
done

step "draft model (the fixture drafting for itself)"
run_example cpp-draft "$work/cpp/tandem_example_cpp" "$model" "Hello" 12 "$model"
grep -q '^speculative: model k=4, [1-9][0-9]* drafts, [1-9][0-9]* drafted, [1-9][0-9]* accepted' "$work/cpp-draft.out" ||
  { cat "$work/cpp-draft.out" >&2; die "draft model run: unexpected metrics"; }
[[ $(head -n -2 "$work/cpp-draft.out") == "$(head -n -2 "$work/c.out")" ]] || die "draft model run changed the text"

echo "install test passed"
