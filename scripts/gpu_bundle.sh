#!/usr/bin/env bash
# Packs what bench/gpu_check.sh needs to run on a lent GPU machine, which has nvcc, CMake,
# ninja, PyTorch and the NVIDIA driver but none of the Debian packages tandem builds
# against (spdlog, fmt, Boost, PCRE2, GTest) and cannot fetch them:
#
#   scripts/gpu_bundle.sh [BUILD_DIR] [BUNDLE_DIR]
#
# BUILD_DIR (default build/release) must be a build with the CUDA backend (nvcc found at
# configure time; sm_80 and sm_90 code, no -march=native). The CUDA test and benchmark
# binaries, `tandem` and `tandem_make_fixture` are built there, copied stripped into
# BUNDLE_DIR (default build/gpu-bundle) in the build's layout (tests/, bench/, apps/), with
# every shared library they need that is neither the C/C++ runtime nor the CUDA driver,
# cuBLAS or cuBLASLt (the machine's own) in BUNDLE_DIR/lib. The device tool carries one
# folder of at most 64 MiB with the source tree: the script fails above 56 MiB.
#
#   device run: carry ["build/gpu-bundle"], command
#     TANDEM_CUDA_BUILD=build/gpu-bundle bash bench/gpu_check.sh $OUT
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-$ROOT/build/release}
BUNDLE=${2:-$ROOT/build/gpu-bundle}
# The binaries, by their place in the build tree (the layout gpu_check.sh expects).
BINS_REL=(tests/test_cuda_ops tests/test_cuda_forward tests/test_cuda_greedy tests/test_cuda_sampling tests/test_simt
          tests/test_cuda_graph tests/test_cuda_graph_forward bench/bench_cuda apps/tandem tandem_make_fixture)
TARGETS=()
for rel in "${BINS_REL[@]}"; do TARGETS+=("$(basename "$rel")"); done

[ -f "$BUILD/kernels/cuda/libtandem_cuda_device.a" ] || {
  echo "gpu_bundle: $BUILD has no CUDA device build (configure with -DTANDEM_CUDA=ON and nvcc on the PATH)" >&2
  exit 1
}
cmake --build "$BUILD" --target "${TARGETS[@]}" >/dev/null
rm -rf "$BUNDLE"
mkdir -p "$BUNDLE/lib"
declare -a BINS=()
for rel in "${BINS_REL[@]}"; do
  [ -x "$BUILD/$rel" ] || { echo "gpu_bundle: $rel not built in $BUILD" >&2; exit 1; }
  mkdir -p "$BUNDLE/$(dirname "$rel")"
  strip --strip-unneeded -o "$BUNDLE/$rel" "$BUILD/$rel"
  BINS+=("$BUNDLE/$rel")
done
# Shared libraries to carry: everything ldd resolves except the C/C++ runtime, the loader
# and the libraries the GPU machine brings (driver, cuBLAS, cuBLASLt).
ldd "${BINS[@]}" 2>/dev/null | awk '/=> \//{print $1, $3}' | sort -u | while read -r name path; do
  case $name in
    libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|libgcc_s.so*|libstdc++.so*|ld-linux*|libcuda.so*|libcublas.so*|libcublasLt.so*) ;;
    *) cp -L "$path" "$BUNDLE/lib/$name" ;;
  esac
done
size=$(du -sm "$BUNDLE" | cut -f1)
echo "gpu_bundle: $BUNDLE: ${#BINS[@]} binaries, $(ls "$BUNDLE/lib" | wc -l) libraries ($(ls "$BUNDLE/lib" | tr '\n' ' ')), ${size} MiB"
[ "$size" -le 56 ] || { echo "gpu_bundle: ${size} MiB is more than the device run can carry with the tree" >&2; exit 1; }
