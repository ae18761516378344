#include "tandem/version.hpp"

namespace tandem {
const char* version_string() { return TANDEM_VERSION_STRING; }
}  // namespace tandem
