// The non-template parts of the record codec (record_json.h): printable strings, values quoted in messages.
#include "io/record_json.h"

namespace ampcheck::io {

void make_json_strings_printable(nlohmann::json& j) {
  if (j.is_string()) {
    auto& text = j.get_ref<std::string&>();
    if (first_unprintable(text) != std::string::npos) text = printable_text(text);
  } else if (j.is_array()) {
    for (auto& e : j) make_json_strings_printable(e);
  } else if (j.is_object()) {
    bool keys_printable = true;
    for (auto it = j.begin(); it != j.end(); ++it) {
      keys_printable &= first_unprintable(it.key()) == std::string::npos;
      make_json_strings_printable(it.value());
    }
    if (!keys_printable) {
      nlohmann::json renamed = nlohmann::json::object();
      for (auto it = j.begin(); it != j.end(); ++it) renamed[printable_text(it.key())] = std::move(it.value());
      j = std::move(renamed);
    }
  }
}

std::string quote_json_value(const nlohmann::json& j) {
  // replace: a string that is not UTF-8 (a value not made printable) is quoted, not thrown on
  std::string text = printable_text(j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  constexpr size_t kMax = 80;
  if (text.size() > kMax) {
    size_t cut = kMax;
    while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;  // not inside a UTF-8 sequence
    text = text.substr(0, cut) + "...";
  }
  return text;
}

}  // namespace ampcheck::io
