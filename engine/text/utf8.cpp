#include "engine/text/utf8.hpp"

namespace tandem::utf8 {

namespace {

// Valid range of the second byte for a given lead byte (Unicode Table 3-7). The narrowed
// ranges exclude overlong forms (E0, F0), surrogates (ED) and code points > U+10FFFF (F4).
struct LeadInfo {
  uint8_t len;             // total sequence length, 0 when the byte cannot start a sequence
  uint8_t lo, hi;          // allowed range of the second byte
};

LeadInfo lead_info(uint8_t b) {
  if (b < 0x80) return {1, 0, 0};
  if (b < 0xC2) return {0, 0, 0};  // continuation byte or overlong 2-byte lead
  if (b < 0xE0) return {2, 0x80, 0xBF};
  if (b == 0xE0) return {3, 0xA0, 0xBF};
  if (b == 0xED) return {3, 0x80, 0x9F};
  if (b < 0xF0) return {3, 0x80, 0xBF};
  if (b == 0xF0) return {4, 0x90, 0xBF};
  if (b < 0xF4) return {4, 0x80, 0xBF};
  if (b == 0xF4) return {4, 0x80, 0x8F};
  return {0, 0, 0};
}

}  // namespace

Decoded decode_one(std::string_view s, size_t pos) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data()) + pos;
  const size_t avail = s.size() - pos;
  const uint8_t b0 = p[0];
  const LeadInfo li = lead_info(b0);
  if (li.len == 1) return {b0, 1, Decoded::Status::Ok};
  if (li.len == 0) return {kReplacement, 1, Decoded::Status::Invalid};

  char32_t cp = b0 & (0xFF >> (li.len + 1));
  for (uint32_t i = 1; i < li.len; ++i) {
    if (i >= avail) return {kReplacement, i, Decoded::Status::Truncated};
    const uint8_t b = p[i];
    const bool ok = i == 1 ? (b >= li.lo && b <= li.hi) : (b >= 0x80 && b <= 0xBF);
    // The bytes before this one are the maximal subpart; this byte starts anew.
    if (!ok) return {kReplacement, i, Decoded::Status::Invalid};
    cp = (cp << 6) | (b & 0x3F);
  }
  return {cp, li.len, Decoded::Status::Ok};
}

void append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

bool is_valid(std::string_view s) {
  for (size_t pos = 0; pos < s.size();) {
    if (static_cast<uint8_t>(s[pos]) < 0x80) {  // ASCII fast path
      ++pos;
      continue;
    }
    const Decoded d = decode_one(s, pos);
    if (d.status != Decoded::Status::Ok) return false;
    pos += d.len;
  }
  return true;
}

std::string sanitize(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t pos = 0; pos < s.size();) {
    const Decoded d = decode_one(s, pos);
    if (d.status == Decoded::Status::Ok) {
      out.append(s.substr(pos, d.len));
    } else {
      append(out, kReplacement);
    }
    pos += d.len;
  }
  return out;
}

}  // namespace tandem::utf8
