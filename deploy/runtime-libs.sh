#!/usr/bin/env bash
# The shared libraries a built `tandem` needs at run time, for the slim runtime stage of the
# Dockerfiles: the Debian packages that own them go to OUT/packages.txt (the runtime stage
# apt-installs exactly those), libraries no package owns (the CUDA toolkit's, under
# /usr/local/cuda) are copied to OUT/lib. Derived from the binary itself, so the runtime
# image follows whatever scripts/setup.sh and the CMake preset made it link.
#   deploy/runtime-libs.sh BINARY OUT
# The NVIDIA driver's libcuda.so.1 is skipped: the container runtime mounts the host's.
set -euo pipefail
bin=$1 out=$2
mkdir -p "$out/lib"
: >"$out/packages.txt"
ldd "$bin" | while read -r name arrow path _; do
  if [ "$arrow" != "=>" ]; then continue; fi   # the vDSO and the dynamic loader itself
  case "$name" in libcuda.so*) continue ;; esac
  if [ "$path" = "not" ]; then echo "runtime-libs: $bin needs $name, which is not found" >&2; exit 1; fi
  real=$(readlink -f "$path")
  pkg=""
  # Debian registers some files under /lib, some under /usr/lib (merged /usr): ask for both.
  for p in "$path" "$real" "${real#/usr}" "/usr$real"; do
    pkg=$(dpkg -S "$p" 2>/dev/null | head -n1 | cut -d: -f1) && [ -n "$pkg" ] && break
  done
  if [ -n "$pkg" ]; then
    echo "$pkg" >>"$out/packages.txt"
  else
    cp -L "$path" "$out/lib/$name"
  fi
done
sort -u -o "$out/packages.txt" "$out/packages.txt"
echo "runtime-libs: $(wc -l <"$out/packages.txt") packages, $(ls "$out/lib" | wc -l) unpackaged libraries"
