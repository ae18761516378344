// Seeds for requests that give none. A request without a seed must not share its random
// draws with any other: two users sending the same prompt get independent texts, and no two
// requests draw correlated noise at the same positions (coupled verification keys its noise
// by (seed, position), so a shared default seed would make every unseeded request the same).
#pragma once
#include <cstdint>

namespace tandem {

// 64 bits from the operating system's random source (std::random_device: the getrandom
// system call or RDRAND/RDSEED under libstdc++). Thread-safe; throws std::runtime_error when
// the system has no random source to give.
uint64_t fresh_seed();

}  // namespace tandem
