#!/usr/bin/env bash
# The CUDA compiler launcher of tandem_cuda_device (kernels/cuda/CMakeLists.txt): runs the nvcc
# command it is given with ptxas' resource report (-Xptxas=-v, which changes no code) and keeps
# the report beside the object, as <object>.ptxas, out of the build log. The build's own
# compilation is what tests/cuda_device_resources.py then reads (registers, stack, spills per
# kernel and architecture), so the kernels are not compiled a second time to check them.
obj="" prev=""
for a in "$@"; do
  [ "$prev" = "-o" ] && obj=$a
  prev=$a
done
[ -z "$obj" ] && exec "$@"
err=$(mktemp)
"$@" -Xptxas=-v 2>"$err"
rc=$?
report='^ptxas info|bytes stack frame'
grep -E "$report" "$err" >"$obj.ptxas.part"
grep -vE "$report" "$err" >&2
rm -f "$err"
if [ $rc -eq 0 ]; then mv "$obj.ptxas.part" "$obj.ptxas"; else rm -f "$obj.ptxas.part"; fi
exit $rc
