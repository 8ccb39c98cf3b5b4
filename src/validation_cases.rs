//! The table of valid and invalid inputs (tests/validation/cases.json) that
//! the Rust validators and the producers in other languages are tested
//! against, so that all of them refuse exactly what Rust refuses.

use std::collections::BTreeSet;

use serde_json::Value;

use crate::Error;

const CASES: &str = include_str!("../tests/validation/cases.json");
const WIRE_FORMAT: &str = include_str!("../docs/wire-format.md");

fn all() -> Value {
    serde_json::from_str(CASES).expect("tests/validation/cases.json is JSON")
}

/// Decodes a text of the table: `None` when it is no Rust string (it holds
/// a lone surrogate).
pub(crate) fn text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Array(parts) => parts.iter().map(text).collect(),
        Value::Object(o) if o.contains_key("repeat") => {
            let times = usize::try_from(o["times"].as_u64()?).ok()?;
            Some(text(&o["repeat"])?.repeat(times))
        }
        Value::Object(o) if o.contains_key("utf16") => {
            let units: Option<Vec<u16>> = o["utf16"]
                .as_array()?
                .iter()
                .map(|u| u16::try_from(u.as_u64()?).ok())
                .collect();
            String::from_utf16(&units?).ok()
        }
        _ => panic!("not a text of cases.json: {v}"),
    }
}

/// The code points the table lists as whitespace or control characters.
pub(crate) fn forbidden_chars() -> Vec<(u32, u32)> {
    let hex = |s: &str| u32::from_str_radix(s, 16).unwrap();
    all()["forbidden_chars"]["ranges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let r = r.as_str().unwrap();
            let (lo, hi) = r.split_once('-').unwrap_or((r, r));
            (hex(lo), hex(hi))
        })
        .collect()
}

/// Whether `e` is the error Rust reports for a break of `rule`.
fn reports(rule: &str, e: &Error) -> bool {
    match rule.split('.').next().unwrap() {
        "queue-name" => matches!(e, Error::InvalidQueueName { .. }),
        "id" => matches!(e, Error::InvalidMessageId { .. }),
        "header-name" | "headers" => matches!(e, Error::InvalidHeader { .. }),
        "group" => matches!(e, Error::InvalidGroup { .. }),
        "payload" => matches!(e, Error::PayloadTooLarge { .. }),
        _ => matches!(e, Error::InvalidArgument(_)),
    }
}

/// Runs `validate` on every case of `section` and fails with the list of
/// those it judges otherwise than the table. `validate` returns `None` for
/// an input Rust cannot represent, which the table must call invalid.
pub(crate) fn assert_rust_agrees(section: &str, validate: impl Fn(&Value) -> Option<Result<(), Error>>) {
    let all = all();
    let cases = all[section]
        .as_array()
        .unwrap_or_else(|| panic!("no section {section}"));
    let mut wrong = Vec::new();
    for (i, case) in cases.iter().enumerate() {
        let breaks = case["breaks"].as_str();
        assert!(
            breaks.is_some() != (case["valid"] == true),
            "{section}[{i}] must be valid or name one rule it breaks"
        );
        let verdict = validate(&case["input"]);
        let agrees = match (&verdict, breaks) {
            (None, rule) => rule.is_some(),
            (Some(Ok(())), rule) => rule.is_none(),
            (Some(Err(e)), Some(rule)) => reports(rule, e),
            (Some(Err(_)), None) => false,
        };
        if !agrees {
            wrong.push(format!(
                "{section}[{i}] {}: table {breaks:?}, Rust {verdict:?}",
                case["input"]
            ));
        }
    }
    assert!(wrong.is_empty(), "Rust disagrees with the table:\n{}", wrong.join("\n"));
}

/// The rule names of the table "Validation" of docs/wire-format.md: the
/// first cell of each row, in backticks.
fn documented_rules() -> BTreeSet<String> {
    let section = WIRE_FORMAT
        .split("\n## ")
        .find(|s| s.starts_with("Validation"))
        .expect("docs/wire-format.md has a section Validation");
    section
        .lines()
        .filter_map(|l| l.strip_prefix("| `")?.split_once('`'))
        .map(|(rule, _)| rule.to_string())
        .collect()
}

#[test]
fn every_documented_rule_has_cases_and_every_case_a_documented_rule() {
    let all = all();
    let broken: BTreeSet<String> = all
        .as_object()
        .unwrap()
        .values()
        .filter_map(Value::as_array)
        .flatten()
        .filter_map(|c| c["breaks"].as_str().map(String::from))
        .collect();
    assert_eq!(documented_rules(), broken);
}
