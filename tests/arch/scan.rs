//! A small Rust lexer, just enough for the architecture rules: comments removed,
//! string and character literals blanked, test code (`#[cfg(test)]` items,
//! `mod tests { .. }` blocks) dropped; what remains is a list of tokens with
//! their line numbers.

/// One token of code: an identifier or number, `::`, or one punctuation character.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tok {
    pub text: String,
    /// 1-based line in the file.
    pub line: usize,
    /// How many inline (non-test) `mod name { .. }` blocks enclose the token: a
    /// `super::` inside one climbs that many levels before it leaves the file's module.
    pub inline_depth: usize,
}

/// The code of one file, test code removed.
#[derive(Debug, Default)]
pub struct Code {
    pub toks: Vec<Tok>,
    /// Modules declared here as `#[cfg(test)] mod name;`: their files are test code.
    pub test_mods: Vec<String>,
    /// The file starts with `#![cfg(test)]`.
    pub all_test: bool,
}

/// Lex `src` and drop its test code.
pub fn code(src: &str) -> Code {
    let toks = tokenize(&strip(src));
    let mut code = Code::default();
    let mut keep = vec![true; toks.len()];
    let mut i = 0;
    while i < toks.len() {
        if is_seq(&toks, i, &["#", "!", "[", "cfg", "(", "test", ")", "]"]) {
            code.all_test = true;
            return code;
        }
        let end = if is_seq(&toks, i, &["#", "[", "cfg", "(", "test", ")", "]"]) {
            // Further attributes of the same item, then the item itself.
            let mut j = i + 7;
            while is_seq(&toks, j, &["#", "["]) {
                j = matching(&toks, j + 1) + 1;
            }
            if let Some(name) = mod_declaration(&toks, j) {
                code.test_mods.push(name);
            }
            Some(item_end(&toks, j))
        } else if is_seq(&toks, i, &["mod", "tests", "{"]) {
            Some(matching(&toks, i + 2))
        } else {
            None
        };
        match end {
            Some(end) => {
                for k in keep.iter_mut().take(end + 1).skip(i) {
                    *k = false;
                }
                i = end + 1;
            }
            None => i += 1,
        }
    }
    code.toks = toks.into_iter().zip(keep).filter_map(|(t, k)| k.then_some(t)).collect();
    mark_inline_modules(&mut code.toks);
    code
}

/// `src` with comments removed and the contents of string and character
/// literals replaced by spaces; newlines are kept, so lines keep their numbers.
pub fn strip(src: &str) -> String {
    let c: Vec<char> = src.chars().collect();
    let mut out = String::with_capacity(src.len());
    let blank = |out: &mut String, ch: char| out.push(if ch == '\n' { '\n' } else { ' ' });
    let mut i = 0;
    while i < c.len() {
        let ch = c[i];
        let next = c.get(i + 1).copied();
        if ch == '/' && next == Some('/') {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if ch == '/' && next == Some('*') {
            // Block comments nest.
            let mut depth = 0usize;
            while i < c.len() {
                if c[i] == '/' && c.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if c[i] == '*' && c.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    blank(&mut out, c[i]);
                    i += 1;
                }
            }
            out.push(' ');
        } else if let Some((open, hashes)) = raw_string_start(&c, i) {
            out.extend(&c[i..i + open]);
            i += open;
            let closes = |k: usize| c[k] == '"' && (1..=hashes).all(|h| c.get(k + h) == Some(&'#'));
            while i < c.len() && !closes(i) {
                blank(&mut out, c[i]);
                i += 1;
            }
            out.push('"');
            out.extend(std::iter::repeat_n('#', hashes));
            i += 1 + hashes;
        } else if ch == '"' {
            out.push('"');
            i += 1;
            while i < c.len() && c[i] != '"' {
                if c[i] == '\\' {
                    blank(&mut out, c[i]);
                    i += 1;
                }
                if let Some(&e) = c.get(i) {
                    blank(&mut out, e);
                }
                i += 1;
            }
            out.push('"');
            i += 1;
        } else if ch == '\'' && next == Some('\\') {
            // An escaped character literal: '\n', '\'', '\\', '\u{1F600}'.
            out.push_str("'  ");
            i += 3;
            while i < c.len() && c[i] != '\'' && c[i] != '\n' {
                blank(&mut out, c[i]);
                i += 1;
            }
            out.push('\'');
            i += 1;
        } else if ch == '\'' && c.get(i + 2) == Some(&'\'') {
            // A plain character literal; anything else after a quote is a lifetime or label.
            out.push_str("' '");
            i += 3;
        } else {
            out.push(ch);
            i += 1;
        }
    }
    out
}

/// If a raw string literal (`r"`, `r#"`, `br#"`, `cr"`) starts at `i`: the length
/// of its opening (prefix, hashes, quote) and its number of hashes.
fn raw_string_start(c: &[char], i: usize) -> Option<(usize, usize)> {
    let ident = |k: usize| c.get(k).is_some_and(|ch| ch.is_alphanumeric() || *ch == '_');
    let starts_word = |k: usize| k == 0 || !ident(k - 1);
    let prefix = if c[i] == 'r' && starts_word(i) {
        1
    } else if (c[i] == 'b' || c[i] == 'c') && c.get(i + 1) == Some(&'r') && starts_word(i) {
        2
    } else {
        return None;
    };
    let hashes = c[i + prefix..].iter().take_while(|ch| **ch == '#').count();
    (c.get(i + prefix + hashes) == Some(&'"')).then_some((prefix + hashes + 1, hashes))
}

/// Split stripped code into tokens: identifiers and numbers, `::`, single punctuation.
fn tokenize(code: &str) -> Vec<Tok> {
    let mut toks = Vec::new();
    for (n, line) in code.lines().enumerate() {
        let c: Vec<char> = line.chars().collect();
        let mut i = 0;
        while i < c.len() {
            let start = i;
            if c[i].is_alphanumeric() || c[i] == '_' {
                while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
                    i += 1;
                }
            } else if c[i] == ':' && c.get(i + 1) == Some(&':') {
                i += 2;
            } else if c[i].is_whitespace() {
                i += 1;
                continue;
            } else {
                i += 1;
            }
            toks.push(Tok { text: c[start..i].iter().collect(), line: n + 1, inline_depth: 0 });
        }
    }
    toks
}

/// The tokens at `i` are `seq`.
pub fn is_seq(toks: &[Tok], i: usize, seq: &[&str]) -> bool {
    toks.len() >= i + seq.len() && seq.iter().zip(&toks[i..]).all(|(s, t)| t.text == *s)
}

/// The token is an identifier (or a number).
pub fn is_ident(t: &Tok) -> bool {
    t.text.chars().next().is_some_and(|c| c.is_alphanumeric() || c == '_')
}

fn opens(t: &Tok) -> bool {
    matches!(t.text.as_str(), "(" | "[" | "{")
}

fn closes(t: &Tok) -> bool {
    matches!(t.text.as_str(), ")" | "]" | "}")
}

/// Index of the bracket closing the one at `open` (the last token if none does).
pub fn matching(toks: &[Tok], open: usize) -> usize {
    let mut depth = 0usize;
    for (k, t) in toks.iter().enumerate().skip(open) {
        if opens(t) {
            depth += 1;
        } else if closes(t) {
            depth = depth.saturating_sub(1);
            if depth == 0 {
                return k;
            }
        }
    }
    toks.len().saturating_sub(1)
}

/// Index of the last token of the item starting at `start`: its `;` or the `}`
/// closing its body.
fn item_end(toks: &[Tok], start: usize) -> usize {
    let mut depth = 0usize;
    for (k, t) in toks.iter().enumerate().skip(start) {
        if t.text == "{" && depth == 0 {
            return matching(toks, k);
        } else if opens(t) {
            depth += 1;
        } else if closes(t) {
            if depth == 0 {
                // The enclosing block ends: the item was the last thing in it.
                return k.saturating_sub(1).max(start);
            }
            depth -= 1;
        } else if t.text == ";" && depth == 0 {
            return k;
        }
    }
    toks.len().saturating_sub(1)
}

/// `[pub[(..)]] mod NAME;` at `i`: NAME.
fn mod_declaration(toks: &[Tok], i: usize) -> Option<String> {
    let j = skip_visibility(toks, i);
    (is_seq(toks, j, &["mod"]) && toks.get(j + 1).is_some_and(is_ident) && is_seq(toks, j + 2, &[";"]))
        .then(|| toks[j + 1].text.clone())
}

/// Index after a `pub` / `pub(..)` at `i` (or `i`).
fn skip_visibility(toks: &[Tok], i: usize) -> usize {
    if !is_seq(toks, i, &["pub"]) {
        i
    } else if is_seq(toks, i + 1, &["("]) {
        matching(toks, i + 1) + 1
    } else {
        i + 1
    }
}

/// Set each token's `inline_depth`.
fn mark_inline_modules(toks: &mut [Tok]) {
    // Brace depths at which the enclosing inline modules opened.
    let mut open_at: Vec<usize> = Vec::new();
    let mut depth = 0usize;
    for i in 0..toks.len() {
        toks[i].inline_depth = open_at.len();
        match toks[i].text.as_str() {
            "{" => {
                let is_mod = i >= 2 && toks[i - 2].text == "mod" && is_ident(&toks[i - 1]);
                if is_mod {
                    open_at.push(depth);
                }
                depth += 1;
            }
            "}" => {
                depth = depth.saturating_sub(1);
                if open_at.last() == Some(&depth) {
                    open_at.pop();
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(src: &str) -> Vec<String> {
        code(src).toks.into_iter().map(|t| t.text).collect()
    }

    #[test]
    fn comments_and_literals_are_blanked_lines_kept() {
        let src = "a // println!(\"x\")\n/* crate::x /* nested */ still */ b\n\"crate::y \\\" // no\" c\nr#\"crate::z \" quote\"# d\n'\"' e '\\'' f 'a: g<'b> '\\u{1F600}' h\nbr\"//\" i b'\"' j";
        let s = strip(src);
        assert_eq!(s.lines().count(), src.lines().count());
        assert!(!s.contains("crate"), "{s}");
        assert!(!s.contains("println"), "{s}");
        let t = texts(src);
        for w in ["a", "b", "c", "d", "e", "f", "g", "h", "i", "j"] {
            assert!(t.contains(&w.to_owned()), "{w} lost in {t:?}");
        }
        let lines: Vec<usize> = code(src).toks.iter().filter(|t| t.text.len() == 1).map(|t| t.line).collect();
        assert!(lines.contains(&6));
        // Raw identifiers are not raw strings.
        assert!(texts("r#type = \"x\"; y").contains(&"y".to_owned()));
    }

    #[test]
    fn test_code_is_dropped() {
        let src = "use a;\n#[cfg(test)]\nuse b;\n#[cfg(test)]\n#[allow(unused)]\nfn helper() -> Result<(), [u8; 2]> { c() }\n\
                   fn d() {}\n#[cfg(test)]\nmod golden;\n#[cfg(test)]\nmod tests {\n use e;\n mod inner { f(); }\n}\nfn g() {}\nmod tests {\n h();\n}\n";
        let c = code(src);
        let t: Vec<&str> = c.toks.iter().map(|t| t.text.as_str()).collect();
        for gone in ["b", "helper", "c", "golden", "e", "inner", "f", "h"] {
            assert!(!t.contains(&gone), "{gone} kept in {t:?}");
        }
        for kept in ["a", "d", "g"] {
            assert!(t.contains(&kept), "{kept} lost in {t:?}");
        }
        assert_eq!(c.test_mods, ["golden"]);
        assert!(code("#![cfg(test)]\nfn x() {}").all_test);
    }

    #[test]
    fn inline_module_depth() {
        let c = code("fn a() {}\nmod m { fn b() { {} } mod n { c } d }\ne");
        let depth = |w: &str| c.toks.iter().find(|t| t.text == w).unwrap().inline_depth;
        assert_eq!((depth("a"), depth("b"), depth("c"), depth("d"), depth("e")), (0, 1, 2, 1, 0));
    }
}
