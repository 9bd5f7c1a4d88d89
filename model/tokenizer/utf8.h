// UTF-8 well-formedness (Unicode 15, Table 3-7: no overlongs, no surrogates, nothing above
// U+10FFFF) and repair with U+FFFD. Internal to linserve_model_format.
#ifndef LINSERVE_MODEL_TOKENIZER_UTF8_H_
#define LINSERVE_MODEL_TOKENIZER_UTF8_H_

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace linserve {

inline constexpr std::string_view kReplacementCharacter = "\xEF\xBF\xBD";  // U+FFFD

// Byte offset of the first byte that does not belong to a well-formed character, or nullopt
// when all of `text` is well-formed UTF-8.
std::optional<size_t> FirstInvalidUtf8(std::string_view text);

// Appends the well-formed characters at the start of `bytes` to `out`, replacing each maximal
// ill-formed subpart with one U+FFFD (the W3C/WHATWG "maximal subpart" practice). A character
// cut off by the end of `bytes` is held back (not consumed) unless `final`, in which case it too
// becomes one U+FFFD. Returns the number of bytes consumed.
size_t AppendRepairedUtf8(std::string_view bytes, bool final, std::string& out);

}  // namespace linserve

#endif  // LINSERVE_MODEL_TOKENIZER_UTF8_H_
