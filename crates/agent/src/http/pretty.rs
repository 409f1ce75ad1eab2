//! `?pretty`: compact JSON re-indented, byte for byte what `serde_json::to_vec_pretty`
//! writes (two spaces, `": "`, empty arrays and objects as `[]` and `{}`).
//!
//! Why not `to_vec_pretty` itself: every answer type's `Serialize` is instantiated
//! once per serializer type, and the pretty one doubled the agent's JSON code for a
//! flag people set by hand (the agent is the largest crate of the first build). The
//! input is always serde_json's own compact output — no whitespace outside strings —
//! so re-indenting is a scan that only has to skip over strings.

/// `compact` (serde_json's compact output) re-indented as serde_json's pretty output.
pub(crate) fn reindent(compact: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(compact.len() + compact.len() / 2);
    reindent_into(compact, 0, &mut out);
    out
}

/// `compact` re-indented onto the end of `out` as a value nested `depth` levels deep
/// (an item of a pretty array is at depth 1: `list_body.rs` writes a long list's
/// items one at a time).
pub(crate) fn reindent_into(compact: &[u8], mut depth: usize, out: &mut Vec<u8>) {
    out.reserve(compact.len() + compact.len() / 2);
    let mut i = 0;
    while i < compact.len() {
        let b = compact[i];
        match b {
            b'"' => {
                // Copy the string whole: its brackets, commas and colons are text.
                let start = i;
                i += 1;
                while i < compact.len() {
                    match compact[i] {
                        b'\\' => i += 2,
                        b'"' => break,
                        _ => i += 1,
                    }
                }
                let end = (i + 1).min(compact.len());
                out.extend_from_slice(&compact[start..end]);
            }
            b'{' | b'[' => {
                let close = if b == b'{' { b'}' } else { b']' };
                out.push(b);
                if compact.get(i + 1) == Some(&close) {
                    out.push(close);
                    i += 1;
                } else {
                    depth += 1;
                    newline(out, depth);
                }
            }
            b'}' | b']' => {
                depth = depth.saturating_sub(1);
                newline(out, depth);
                out.push(b);
            }
            b',' => {
                out.push(b',');
                newline(out, depth);
            }
            b':' => out.extend_from_slice(b": "),
            _ => out.push(b),
        }
        i += 1;
    }
}

fn newline(out: &mut Vec<u8>, depth: usize) {
    out.push(b'\n');
    out.resize(out.len() + 2 * depth, b' ');
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::reindent;

    fn same_as_serde_json(value: &Value) {
        let compact = serde_json::to_vec(value).unwrap();
        let want = serde_json::to_vec_pretty(value).unwrap();
        let got = reindent(&compact);
        assert_eq!(
            String::from_utf8(got).unwrap(),
            String::from_utf8(want).unwrap()
        );
    }

    #[test]
    fn matches_serde_jsons_pretty_output() {
        for value in [
            json!(null),
            json!(7),
            json!(-1.5e300),
            json!("plain"),
            json!([]),
            json!({}),
            json!([[], {}, [[]], {"a": {}}]),
            json!({"Name": "n1", "Meta": {"rack": "r1"}, "Tags": ["a", "b"], "N": 3}),
            json!({"Allocs": [{"ID": "a1", "Ok": true, "Err": null}, {"ID": "a2"}]}),
            // Strings holding everything the scan treats as structure, and escapes.
            json!({"s": "{[,:]} \"quoted\" \\ back\\slash \\\" \n\t \u{1} é 😀"}),
            json!({"}": "]", "\\": "\"", ",": [":", "{", "["]}),
            json!(["\\", "\\\\", "\"\\", "end\\"]),
        ] {
            same_as_serde_json(&value);
        }
    }

    #[test]
    fn deep_and_wide_values_match_too() {
        let mut v = json!("leaf");
        for i in 0..40 {
            v = if i % 2 == 0 {
                json!([v, i, {}])
            } else {
                json!({"k": v, "e": [], "n": i})
            };
        }
        same_as_serde_json(&v);
        let wide: Value = (0..500)
            .map(|i| (format!("key{i}"), json!([i, format!("v,{i}:")])))
            .collect::<serde_json::Map<_, _>>()
            .into();
        same_as_serde_json(&wide);
    }

    #[test]
    fn truncated_input_does_not_panic() {
        let compact = serde_json::to_vec(&json!({"a": ["x\\\"y", {"b": []}]})).unwrap();
        for len in 0..compact.len() {
            reindent(&compact[..len]);
        }
        reindent(b"]]]}}}");
    }
}
