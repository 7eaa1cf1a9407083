//! What the server and its pipelines say, made safe to show in a terminal.
//!
//! Every string the client got from a server (questions, status messages,
//! results, errors) passes through here before it is printed: a pipeline, or an
//! argument it echoes, must not be able to move the cursor, erase or recolour
//! what the person reads, set the window title, or reorder text — so that
//! "production" cannot be hidden from the person asked to approve.
//!
//! Removed: escape sequences whole (CSI `ESC [ … final`, OSC `ESC ] … BEL/ST`,
//! DCS/SOS/PM/APC strings up to ST, and two-byte `ESC x`), their 8-bit C1 forms,
//! every other C0 and C1 control and DEL, and the Unicode bidirectional
//! controls (embeddings, overrides, isolates, marks). Kept: line feeds and tabs
//! in multi-line text ([`text`]); in one-line places ([`line`]) they become
//! spaces.

use serde_json::{Map, Value};

/// True for the Unicode bidirectional formatting characters: LRE, RLE, PDF,
/// LRO, RLO (U+202A–U+202E), LRI, RLI, FSI, PDI (U+2066–U+2069), LRM, RLM
/// (U+200E, U+200F) and ALM (U+061C).
fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' | '\u{200E}' | '\u{200F}' | '\u{061C}')
}

/// Skips the rest of a control string (OSC, DCS, SOS, PM, APC) up to and
/// including its terminator: BEL, ST (`ESC \`) or the C1 ST.
fn skip_string(chars: &mut std::iter::Peekable<std::str::Chars<'_>>) {
    while let Some(c) = chars.next() {
        match c {
            '\u{07}' | '\u{9C}' => return,
            '\u{1B}' => {
                if chars.peek() == Some(&'\\') {
                    chars.next();
                }
                return;
            }
            _ => {}
        }
    }
}

/// Skips the rest of a CSI sequence: parameter and intermediate bytes, then
/// its final byte.
fn skip_csi(chars: &mut std::iter::Peekable<std::str::Chars<'_>>) {
    for c in chars.by_ref() {
        if ('\u{40}'..='\u{7E}').contains(&c) {
            return;
        }
        if !('\u{20}'..='\u{3F}').contains(&c) {
            // Not part of a CSI sequence: the sequence was cut off here.
            return;
        }
    }
}

fn clean(s: &str, keep_newlines: bool) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\n' | '\t' if keep_newlines => out.push(c),
            '\n' | '\t' => out.push(' '),
            '\u{1B}' => match chars.next() {
                Some('[') => skip_csi(&mut chars),
                Some(']' | 'P' | 'X' | '^' | '_') => skip_string(&mut chars),
                Some(c) if ('\u{20}'..='\u{2F}').contains(&c) => {
                    // nF: intermediates, then one final byte.
                    while let Some(&n) = chars.peek() {
                        chars.next();
                        if !('\u{20}'..='\u{2F}').contains(&n) {
                            break;
                        }
                    }
                }
                _ => {}
            },
            '\u{9B}' => skip_csi(&mut chars),
            '\u{9D}' | '\u{90}' | '\u{98}' | '\u{9E}' | '\u{9F}' => skip_string(&mut chars),
            c if c.is_control() || is_bidi_control(c) => {}
            c => out.push(c),
        }
    }
    out
}

/// `s` without escape sequences, control characters (but line feeds and tabs)
/// and bidirectional controls: multi-line text (results, questions).
#[must_use]
pub fn text(s: &str) -> String {
    clean(s, true)
}

/// As [`text`], on one line: line feeds and tabs become spaces (status
/// messages, prompts' labels).
#[must_use]
pub fn line(s: &str) -> String {
    clean(s, false)
}

/// `v` with every string, and every object key, passed through [`text`].
#[must_use]
pub fn value(v: Value) -> Value {
    match v {
        Value::String(s) => Value::String(text(&s)),
        Value::Array(items) => Value::Array(items.into_iter().map(value).collect()),
        Value::Object(map) => Value::Object(
            map.into_iter()
                .map(|(k, v)| (text(&k), value(v)))
                .collect::<Map<String, Value>>(),
        ),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn escape_sequences_go_whole() {
        // Colour, cursor movement, erase line, and a hidden (SGR 8) word.
        assert_eq!(text("\u{1b}[31mred\u{1b}[0m"), "red");
        assert_eq!(
            text("staging\u{1b}[2K\u{1b}[1Gproduction"),
            "stagingproduction"
        );
        assert_eq!(
            text("env: \u{1b}[8mproduction\u{1b}[28m"),
            "env: production"
        );
        assert_eq!(text("a\u{1b}[?25lb"), "ab");
        // OSC: a window title, a hyperlink; ended by BEL or ST.
        assert_eq!(text("\u{1b}]0;pwned\u{07}ok"), "ok");
        assert_eq!(
            text("\u{1b}]8;;https://evil.example\u{1b}\\click\u{1b}]8;;\u{1b}\\"),
            "click"
        );
        // DCS and APC strings; a two-byte escape; nF with intermediates.
        assert_eq!(text("x\u{1b}P1$r\u{1b}\\y"), "xy");
        assert_eq!(text("x\u{1b}_apc\u{1b}\\y"), "xy");
        assert_eq!(text("x\u{1b}cy"), "xy");
        assert_eq!(text("x\u{1b}(By"), "xy");
        // Cut off at the end of the string.
        assert_eq!(text("tail\u{1b}[31"), "tail");
        assert_eq!(text("tail\u{1b}]0;title"), "tail");
        assert_eq!(text("tail\u{1b}"), "tail");
    }

    #[test]
    fn c0_c1_del_and_bidi_controls_go() {
        // Carriage return and backspace would let later text overwrite earlier.
        assert_eq!(text("production\rstaging   "), "productionstaging   ");
        assert_eq!(text("prod\u{8}\u{8}\u{8}\u{8}dev"), "proddev");
        assert_eq!(text("a\u{0}b\u{7}c\u{7f}d"), "abcd");
        // 8-bit CSI and OSC, and the other C1 controls.
        assert_eq!(text("\u{9b}31mred"), "red");
        assert_eq!(text("\u{9d}0;t\u{9c}x"), "x");
        assert_eq!(text("a\u{85}b\u{8d}c"), "abc");
        // An override that would show "production" reversed, and isolates.
        assert_eq!(
            text("deploy to \u{202e}noitcudorp\u{202c} now"),
            "deploy to noitcudorp now"
        );
        assert_eq!(text("\u{2067}x\u{2069}\u{200f}\u{61c}"), "x");
    }

    #[test]
    fn plain_text_and_layout_stay() {
        let s = "Déployer « prod » ✓\n\tline two — 日本語 🚀";
        assert_eq!(text(s), s);
        assert_eq!(line("two\nlines\tand tab"), "two lines and tab");
        assert_eq!(line("\u{1b}[1mbold\u{1b}[0m"), "bold");
    }

    #[test]
    fn values_are_cleaned_throughout() {
        let v = json!({
            "status": "working",
            "statusMessage": "to \u{1b}[8mproduction\u{1b}[0m",
            "n": 3,
            "list": ["\u{202e}x", true, null],
            "key\u{1b}[2J": { "deep": "\u{9b}1Ay" },
        });
        assert_eq!(
            value(v),
            json!({
                "status": "working",
                "statusMessage": "to production",
                "n": 3,
                "list": ["x", true, null],
                "key": { "deep": "y" },
            })
        );
    }
}
