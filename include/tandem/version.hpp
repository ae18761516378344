#pragma once
#include "tandem/export.h"

#define TANDEM_VERSION_MAJOR 0
#define TANDEM_VERSION_MINOR 1
#define TANDEM_VERSION_PATCH 0
#define TANDEM_VERSION_STRING "0.1.0"

namespace tandem {
TANDEM_API const char* version_string();
}  // namespace tandem
