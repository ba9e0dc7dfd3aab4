// coetcd::naming: Go's endpoint JSON written and read as Go's encoding/json does, with a small scanner.
#include <coetcd/error.hpp>
#include <coetcd/naming.hpp>

#include <boost/system/system_error.hpp>

#include <cstdio>

namespace coetcd::naming {
namespace {

// A cursor over JSON text. Each read_* returns false on text that is not JSON.
struct json_reader {
  std::string_view in;
  std::size_t at = 0;

  void space() {
    while (at < in.size() && (in[at] == ' ' || in[at] == '\t' || in[at] == '\n' || in[at] == '\r')) ++at;
  }
  bool take(char c) {
    space();
    if (at >= in.size() || in[at] != c) return false;
    ++at;
    return true;
  }
  static int hex(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }
  static void utf8(std::string& out, unsigned cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }
  bool read_hex4(unsigned& cp) {
    if (at + 4 > in.size()) return false;
    cp = 0;
    for (int i = 0; i < 4; ++i) {
      int h = hex(in[at++]);
      if (h < 0) return false;
      cp = cp * 16 + static_cast<unsigned>(h);
    }
    return true;
  }
  bool read_string(std::string& out) {
    if (!take('"')) return false;
    while (at < in.size() && in[at] != '"') {
      char c = in[at++];
      if (static_cast<unsigned char>(c) < 0x20) return false;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (at >= in.size()) return false;
      char e = in[at++];
      switch (e) {
        case '"': case '\\': case '/': out += e; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          unsigned cp = 0;
          if (!read_hex4(cp)) return false;
          // As Go: a surrogate that does not pair with the next escape is U+FFFD, and that
          // escape is read on its own.
          if (cp >= 0xD800 && cp < 0xE000) {
            unsigned low = 0;
            json_reader next{in, at + 2};
            bool paired = cp < 0xDC00 && in.substr(at, 2) == "\\u" && next.read_hex4(low) && low >= 0xDC00 && low < 0xE000;
            if (paired) {
              cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
              at = next.at;
            } else {
              cp = 0xFFFD;
            }
          }
          utf8(out, cp);
          break;
        }
        default: return false;
      }
    }
    return take('"');
  }
  bool read_word(std::string_view w) {
    if (in.substr(at, w.size()) != w) return false;
    at += w.size();
    return true;
  }
  bool read_digits() {
    auto from = at;
    while (at < in.size() && in[at] >= '0' && in[at] <= '9') ++at;
    return at > from;
  }
  // JSON's number grammar, no more: "01", "-", "1.", ".5", "+1" are not numbers to Go.
  bool read_number() {
    if (at < in.size() && in[at] == '-') ++at;
    if (at < in.size() && in[at] == '0') ++at;
    else if (!read_digits()) return false;
    if (at < in.size() && in[at] == '.') {
      ++at;
      if (!read_digits()) return false;
    }
    if (at < in.size() && (in[at] == 'e' || in[at] == 'E')) {
      ++at;
      if (at < in.size() && (in[at] == '+' || in[at] == '-')) ++at;
      if (!read_digits()) return false;
    }
    return true;
  }
  bool read_scalar() {
    space();
    if (at >= in.size()) return false;
    if (in[at] == '"') {
      std::string ignored;
      return read_string(ignored);
    }
    return read_word("null") || read_word("true") || read_word("false") || read_number();
  }
  bool read_member_name(std::string& name) { return read_string(name) && take(':'); }
  // Any one value, its text returned in `text`. Not recursive: a value of a million '[' is
  // refused, not a stack overflow; nested deeper than Go's limit (10000) is refused, as Go does.
  bool skip_value(std::string_view& text) {
    static constexpr std::size_t max_depth = 10000;
    space();
    const auto from = at;
    std::string closers;  // innermost last
    for (;;) {
      space();
      if (at < in.size() && (in[at] == '{' || in[at] == '[')) {
        if (closers.size() >= max_depth) return false;
        closers += in[at++] == '{' ? '}' : ']';
        if (take(closers.back())) {
          closers.pop_back();
        } else {
          std::string name;
          if (closers.back() == '}' && !read_member_name(name)) return false;
          continue;  // to the first element
        }
      } else if (!read_scalar()) {
        return false;
      }
      // After a value: close what ends here, then a comma and the next element.
      for (;;) {
        if (closers.empty()) {
          text = in.substr(from, at - from);
          return true;
        }
        if (take(closers.back())) {
          closers.pop_back();
          continue;
        }
        std::string name;
        if (!take(',') || (closers.back() == '}' && !read_member_name(name))) return false;
        break;
      }
    }
  }
  bool at_end() {
    space();
    return at == in.size();
  }
};

// Go matches a JSON member to a field by exact name, else ignoring ASCII case (encoding/json's
// fold for names of letters other than k and s, as these three are).
bool field_is(std::string_view member, std::string_view field) {
  if (member.size() != field.size()) return false;
  for (std::size_t i = 0; i < member.size(); ++i) {
    char a = member[i], b = field[i];
    if (a >= 'A' && a <= 'Z') a = static_cast<char>(a - 'A' + 'a');
    if (b >= 'A' && b <= 'Z') b = static_cast<char>(b - 'A' + 'a');
    if (a != b) return false;
  }
  return true;
}

// Go's Op is a uint8: an integer literal up to 255 or null; anything else fails the whole value.
bool valid_op(std::string_view text) {
  if (text == "null") return true;
  if (text.empty() || text.size() > 3) return false;
  unsigned n = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
    n = n * 10 + static_cast<unsigned>(c - '0');
  }
  return n <= 255;
}

void append_quoted(std::string& out, std::string_view s) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      // Go's encoder escapes these for HTML: the same text Go writes.
      case '<': out += "\\u003c"; break;
      case '>': out += "\\u003e"; break;
      case '&': out += "\\u0026"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
}

}  // namespace

std::string key(std::string_view target, std::string_view id) {
  std::string k(target);
  k += '/';
  k += id;
  return k;
}

std::string encode(const endpoint& e) {
  std::string_view metadata = e.metadata.empty() ? std::string_view("null") : std::string_view(e.metadata);
  json_reader check{metadata};
  std::string_view text;
  if (!check.skip_value(text) || !check.at_end())
    throw boost::system::system_error(make_error_code(error::invalid_argument), "coetcd::naming::encode: metadata is not one JSON value");
  std::string out = "{\"Op\":0,\"Addr\":";
  append_quoted(out, e.addr);
  out += ",\"Metadata\":";
  out += text;
  out += '}';
  // Inside the object the metadata is one level deeper: 10000 levels of it are too deep for Go.
  json_reader whole{out};
  if (!whole.skip_value(text))
    throw boost::system::system_error(make_error_code(error::invalid_argument), "coetcd::naming::encode: metadata nested too deep");
  return out;
}

std::optional<endpoint> decode(std::string_view value) {
  // What json.Unmarshal into Go's internal.Update{Op uint8; Addr string; Metadata interface{}}
  // takes without an error: the endpoints Manager keeps those values and skips the rest.
  json_reader r{value};
  endpoint e;
  std::string_view whole;
  if (!r.skip_value(whole) || !r.at_end()) return std::nullopt;  // not JSON: skipped
  if (whole == "null") return e;                                  // a no-op for Go: an empty endpoint
  r.at = 0;
  if (!r.take('{')) return std::nullopt;  // an array, string, number or bool: a type error
  if (r.take('}')) return e;
  for (;;) {
    std::string name;
    std::string_view text;
    if (!r.read_member_name(name) || !r.skip_value(text)) return std::nullopt;
    if (field_is(name, "Addr")) {
      if (text != "null") {  // null leaves a string as it was
        json_reader str{text};
        std::string addr;
        if (!str.read_string(addr)) return std::nullopt;
        e.addr = std::move(addr);
      }
    } else if (field_is(name, "Metadata")) {
      e.metadata = std::string(text);
    } else if (field_is(name, "Op")) {
      // Go's Manager takes every put as an add, whatever its Op says.
      if (!valid_op(text)) return std::nullopt;
    }
    if (r.take('}')) break;
    if (!r.take(',')) return std::nullopt;
  }
  return e;
}

std::map<std::string, endpoint> endpoints(const cache& c) {
  std::map<std::string, endpoint> out;
  for (auto& kv : c.range())
    if (auto e = decode(kv.value)) out.emplace(kv.key, std::move(*e));
  return out;
}

}  // namespace coetcd::naming
