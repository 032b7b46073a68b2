// The trajectory file's attributes: string map <-> RunAttributes, each direction one visitor over visit_attributes.
#include "trajectory/run_attributes.h"

#include "io/text.h"

#include <charconv>

namespace ampcheck::trajectory {

namespace {

std::string expected_statuses() {  // "completed, nonfinite, error, running or interrupted"
  std::vector<std::string> words = run_status_words();
  const std::string last = words.back();
  words.pop_back();
  return io::joined(words) + " or " + last;
}

// Reading: takes each known key out of `rest`, which ends as the keys the record does not know.
struct Reader {
  std::map<std::string, std::string> rest;
  const std::string& where;

  [[noreturn]] void bad(const std::string& key, const std::string& value, const std::string& expected) const {
    throw AttributeError(where + ": attribute '" + key + "' is '" + value + "', expected " + expected);
  }
  // the key's text, taken out of `rest`; nullopt when absent. A typed field's empty value stays in `rest` (the field
  // absent, as every reader treated an empty attribute; the file written back keeps it as it was).
  std::optional<std::string> take(const std::string& key, bool typed = true) {
    auto it = rest.find(key);
    if (it == rest.end() || (typed && it->second.empty())) return std::nullopt;
    std::string value = std::move(it->second);
    rest.erase(it);
    return value;
  }
  void operator()(const char* key, RunAttributes::Text& field) { field = take(key, /*typed=*/false); }
  void operator()(const char* key, RunAttributes::Integer& field) {
    const auto text = take(key);
    if (!text) return;
    int64_t x = 0;
    const char* end = text->data() + text->size();
    const auto [p, ec] = std::from_chars(text->data(), end, x);
    // as std::to_string writes it (no sign but '-', no leading zero): written back, the same text
    if (ec != std::errc() || p != end || std::to_string(x) != *text) bad(key, *text, "an integer");
    field = x;
  }
  void operator()(const char* key, std::optional<RunStatus>& field) {
    const auto text = take(key);
    if (!text) return;
    field = parse_run_status(*text);
    if (!field) bad(key, *text, expected_statuses());
  }
  void prefixed(const std::string& prefix, std::map<std::string, std::string>& family) {
    for (auto it = rest.lower_bound(prefix); it != rest.end() && it->first.compare(0, prefix.size(), prefix) == 0;)
      if (it->first.size() > prefix.size()) {
        family[it->first.substr(prefix.size())] = std::move(it->second);
        it = rest.erase(it);
      } else {
        ++it;
      }
  }
};

// Writing (and lookup by key): each present field as its text.
struct Writer {
  std::map<std::string, std::string> out;
  void operator()(const char* key, const RunAttributes::Text& field) {
    if (field) out[key] = *field;
  }
  void operator()(const char* key, const RunAttributes::Integer& field) {
    if (field) out[key] = std::to_string(*field);
  }
  void operator()(const char* key, const std::optional<RunStatus>& field) {
    if (field) out[key] = to_string(*field);
  }
  void prefixed(const std::string& prefix, const std::map<std::string, std::string>& family) {
    for (const auto& [k, v] : family) out[prefix + k] = v;
  }
};

}  // namespace

RunAttributes parse_run_attributes(const std::map<std::string, std::string>& attributes, const std::string& where) {
  RunAttributes a;
  Reader r{attributes, where};
  visit_attributes(a, r);
  a.other = std::move(r.rest);
  return a;
}

std::map<std::string, std::string> attribute_map(const RunAttributes& a) {
  Writer w{a.other};  // a known key set in `other` too: the field wins
  visit_attributes(a, w);
  return std::move(w.out);
}

std::string attribute_text(const RunAttributes& a, const std::string& key) {
  const auto m = attribute_map(a);
  const auto it = m.find(key);
  return it == m.end() ? std::string() : it->second;
}

}  // namespace ampcheck::trajectory
