#pragma once

#define TANDEM_VERSION_MAJOR 0
#define TANDEM_VERSION_MINOR 1
#define TANDEM_VERSION_PATCH 0
#define TANDEM_VERSION_STRING "0.1.0"

namespace tandem {
const char* version_string();
}  // namespace tandem
