#include "kernels/backend.hpp"

namespace tandem::kernels {

Tensor make_tensor(Buffer* buf, DType type, int64_t ne0, int64_t ne1, size_t offset) {
  Tensor t;
  t.buf = buf;
  t.offset = offset;
  t.type = type;
  t.ne[0] = ne0;
  t.ne[1] = ne1;
  return t;
}

}  // namespace tandem::kernels
