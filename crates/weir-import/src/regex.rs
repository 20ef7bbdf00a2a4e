//! The regexes every importer writes for weir (regex-lite syntax): literal
//! text escaped, and the PCRE features weir's regexes lack named. Must
//! never accept a pattern weir would refuse at load.

/// A regex-lite-safe copy of literal text.
pub fn regex_escape(s: &str) -> String {
    let mut o = String::new();
    for c in s.chars() {
        if "\\.+*?()|[]{}^$#&-~".contains(c) {
            o.push('\\');
        }
        o.push(c);
    }
    o
}

/// PCRE features regex-lite lacks.
pub fn unsupported_regex(re: &str) -> Option<&'static str> {
    if re.contains("(?=") || re.contains("(?!") || re.contains("(?<=") || re.contains("(?<!") {
        return Some("look-around");
    }
    if re
        .as_bytes()
        .windows(2)
        .any(|w| w[0] == b'\\' && w[1].is_ascii_digit() && w[1] != b'0')
    {
        return Some("back-references");
    }
    None
}
