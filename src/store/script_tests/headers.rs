//! Headers in the stored value, through every script.

use crate::store::ops::requeue::Requeue;
use crate::store::stored::{decode_stored, encode_stored, ValueParts};
use crate::MessageState;

use super::{fail, Env, NEVER};

/// A value as `NewMessage` encodes it, with headers.
fn with_headers(retry: u32, priority: u8, headers: &[(&str, &str)], payload: &str) -> Vec<u8> {
    let headers: Vec<(String, String)> = headers.iter().map(|(n, v)| (n.to_string(), v.to_string())).collect();
    encode_stored(&ValueParts {
        retry_count: retry,
        backoff: None,
        priority,
        group: None,
        headers: &headers,
        payload: payload.as_bytes(),
    })
}

#[tokio::test]
async fn headers_travel_in_the_value_through_every_script() {
    let env = Env::new().await;
    let k = env.k().clone();
    // Values with ':', '#', '@' and '=' in them, which the header's
    // parsers must not take for their own; a 300-byte one, longer than
    // HEADER_BYTES, so the section outgrows a header-sized read.
    let long = "v".repeat(300);
    let a_headers = [("tenant", "acme:1#2@3=4"), ("big", long.as_str())];
    // No backoff and no priority: the '#' follows the retry count.
    let a_value = with_headers(0, 0, &a_headers, "pay:load");
    let owned = |h: &[(&str, &str)]| -> Vec<(String, String)> {
        h.iter().map(|(n, v)| (n.to_string(), v.to_string())).collect()
    };
    let big_payload = "p".repeat(1000);
    let sent = env
        .send_values(&[
            ("a", a_value.clone(), 60_000, 600_000, true),
            (
                "b",
                with_headers(3, 0, &[("note", "needle"), ("big", &long)], &big_payload),
                60_000,
                NEVER,
                true,
            ),
            (
                "c",
                encode_stored(&ValueParts::new(3, b"a needle in the payload")),
                60_000,
                NEVER,
                true,
            ),
            ("d", with_headers(3, 2, &[("k", "v")], "d"), 0, NEVER, true),
        ])
        .await;
    assert_eq!(sent, vec![1, 1, 1, 1]);
    let whole = env.stored_whole("a").unwrap();
    let colon = a_value.iter().position(|&b| b == b':').unwrap();
    let section_len = a_value.len() - colon - 1 - "pay:load".len();
    assert!(whole.starts_with(&format!("0#{section_len}/")), "{whole}");
    let decoded = |value: &str| {
        let s = decode_stored(value.as_bytes()).unwrap();
        (
            s.headers,
            s.payload.to_vec(),
            s.priority,
            s.retry_count,
            s.expires_at_ms.is_some(),
        )
    };
    assert_eq!(decoded(&whole), (owned(&a_headers), b"pay:load".to_vec(), 0, 0, true));
    assert!(env.stored_whole("d").unwrap().starts_with("3!2#5/"));

    // get, list, browse and search see them; previews cut the payload, not
    // the headers; a search looks in payloads, not in header values.
    let got = env.queue.get("b").await.unwrap().unwrap();
    assert_eq!((got.headers.len(), got.payload.len()), (2, 1000));
    let page = env.queue.list(MessageState::Pending, 0, 10).await.unwrap();
    let listed: Vec<_> = page
        .items
        .iter()
        .map(|m| {
            (
                m.id.to_string(),
                m.headers.len(),
                m.payload.len(),
                m.payload_len,
                m.priority,
            )
        })
        .collect();
    assert_eq!(
        listed,
        [
            ("d".into(), 1, 1, 1, 2),
            ("a".into(), 2, 8, 8, 0),
            ("b".into(), 2, crate::PREVIEW_BYTES, 1000, 0),
            ("c".into(), 0, 23, 23, 0)
        ]
    );
    assert_eq!(page.items[1].headers, owned(&a_headers));
    let browsed = env.queue.browse(MessageState::Pending).await.unwrap();
    assert_eq!(browsed.items[2].headers, got.headers);
    assert_eq!(
        browsed.items[2].payload,
        &big_payload.as_bytes()[..crate::PREVIEW_BYTES]
    );
    let found = env.queue.search(MessageState::Pending, "needle").await.unwrap();
    let ids: Vec<String> = found.items.iter().map(|m| m.id.to_string()).collect();
    assert_eq!(ids, ["c"]);

    // reschedule rewrites the delay past the '#' and keeps the section.
    assert_eq!(env.reschedule("a", 0).await, 1);
    assert_eq!(decoded(&env.stored_whole("a").unwrap()), decoded(&whole));
    assert_eq!(env.promote(10).await[0], 2);
    assert_eq!(env.zset(&k.prio).len(), 1, "promote read the priority before the '#'");

    // claim hands them over; nack reads the retry count 0 before the '#'
    // and buries it at once (the default RETRY would retry it).
    let c = env.claim(10).await;
    assert_eq!(c.ids(), ["d", "a"], "priority 2 first");
    assert_eq!(decoded(&c.values[0]).0, owned(&[("k", "v")]));
    assert_eq!(decoded(&c.values[1]).0, owned(&a_headers));
    assert_eq!(env.nack("a", c.lease, fail(0)).await, 2);
    assert_eq!(env.dead(), ["a"]);

    // requeue drops the deadline and keeps the headers and the priority.
    let done = env
        .run(&Requeue {
            limit: 1000,
            ids: vec!["a"],
        })
        .await;
    assert_eq!(done.requeued, 1);
    let requeued = env.stored_whole("a").unwrap();
    assert_eq!(
        decoded(&requeued),
        (owned(&a_headers), b"pay:load".to_vec(), 0, 0, false)
    );
    let c = env.claim(10).await;
    assert_eq!((c.ids(), decoded(&c.values[0]).0), (vec!["a"], owned(&a_headers)));

    // timeout reads the same retry count: a dead letter, not a retry.
    env.raw(&["ZADD", &k.processing, "XX", "1", "a"]);
    assert_eq!(env.timeout(10).await, vec![1, 1]);
    assert_eq!(env.dead(), ["a"]);
}
