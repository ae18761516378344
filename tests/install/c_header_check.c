/* Compiled as strict C99 with -Wpedantic -Werror on every build (cmake/install.cmake):
 * tandem.h must stay plain C, usable from C compilers and FFI generators. */
#include "tandem/tandem.h"

int tandem_c_header_check(void);
int tandem_c_header_check(void) {
  tandem_generate_params params;
  tandem_stream_fn fn = 0;
  (void)fn;
  return tandem_generate_params_init(&params, sizeof params) == TANDEM_OK && TANDEM_VERSION_MAJOR >= 0;
}
