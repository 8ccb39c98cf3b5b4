//! Message headers through the public API: set at send, read by the
//! handler on every delivery, shown by `get`, and checked against their
//! limits before anything is written.

mod helpers;
use delayqueue_test_support as support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use delayqueue::{Backoff, Error, NewMessage, MAX_HEADERS, MAX_HEADERS_BYTES, MAX_HEADER_NAME_LEN};
use helpers::{recording_headers, start_queue, Headed};
use support::{wait_until, WAIT};

const FETCH: Duration = Duration::from_millis(200);

fn pairs(h: &[(&str, &str)]) -> Vec<(String, String)> {
    h.iter().map(|(n, v)| (n.to_string(), v.to_string())).collect()
}

#[tokio::test]
async fn the_handler_sees_the_headers_on_every_delivery() {
    let (_server, _client, queue) = start_queue("hdr", FETCH, |b| b).await;
    let job = queue
        .send("job")
        .header("tenant", "acme")
        .header("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
        .header("tenant", "acme:2=b")
        .retry_count(2)
        .backoff(Backoff::fixed(Duration::from_millis(50)))
        .await
        .unwrap();
    let mut sent = queue
        .send_batch([NewMessage::new("batched").header("k.1", "é"), NewMessage::new("plain")])
        .await
        .unwrap()
        .into_iter()
        .map(Result::unwrap);
    let (batched, plain) = (sent.next().unwrap(), sent.next().unwrap());
    let want = pairs(&[
        ("tenant", "acme:2=b"),
        ("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"),
    ]);
    assert_eq!(
        queue.get(&job).await.unwrap().unwrap().headers,
        want,
        "a name set twice keeps its last value"
    );
    assert!(queue.get(&plain).await.unwrap().unwrap().headers.is_empty());

    let seen: Arc<Mutex<Vec<Headed>>> = Arc::default();
    let consumer = queue.start_consume(recording_headers(&seen, b"job")).await.unwrap();
    assert!(
        wait_until(WAIT, || seen.lock().unwrap().len() == 4).await,
        "{:?}",
        seen.lock().unwrap()
    );
    consumer.shutdown().await.unwrap();
    let mut seen = seen.lock().unwrap().clone();
    seen.sort();
    let mut expected = vec![
        (job.to_string(), 1, want.clone(), Some("acme:2=b".to_string())),
        (job.to_string(), 2, want, Some("acme:2=b".to_string())),
        (batched.to_string(), 1, pairs(&[("k.1", "é")]), None),
        (plain.to_string(), 1, Vec::new(), None),
    ];
    expected.sort();
    assert_eq!(seen, expected, "the retry keeps them");
}

#[tokio::test]
async fn a_header_outside_its_limits_is_a_typed_error_and_nothing_is_sent() {
    let (_server, _client, queue) = start_queue("hdr-bad", FETCH, |b| b).await;
    let long_name = "n".repeat(MAX_HEADER_NAME_LEN + 1);
    let big = "v".repeat(MAX_HEADERS_BYTES);
    let too_many: Vec<(String, String)> = (0..=MAX_HEADERS).map(|i| (format!("h{i}"), String::new())).collect();
    let bad: Vec<(NewMessage, &str, &str)> = vec![
        (NewMessage::new("x").header("", "v"), "", "1 to"),
        (NewMessage::new("x").header("a b", "v"), "a b", "' '"),
        (NewMessage::new("x").header("a=b", "v"), "a=b", "'='"),
        (NewMessage::new("x").header("ü", "v"), "ü", "'ü'"),
        (NewMessage::new("x").header(long_name.clone(), "v"), &long_name, "1 to"),
        (NewMessage::new("x").header("a", big.as_str()), "a", "MAX_HEADERS_BYTES"),
        (
            too_many.iter().fold(NewMessage::new("x"), |m, (n, v)| m.header(n, v)),
            "h16",
            "MAX_HEADERS",
        ),
    ];
    for (msg, name, reason) in bad {
        let err = queue.send_batch([NewMessage::new("ok"), msg]).await.unwrap_err();
        match &err {
            Error::InvalidHeader { name: n, reason: r } => {
                assert_eq!(n, name, "{err}");
                assert!(r.contains(reason), "{err}");
            }
            _ => panic!("{err:?}"),
        }
    }
    let err = queue.send("x").header("a\n", "v").await.unwrap_err();
    assert!(matches!(err, Error::InvalidHeader { .. }), "{err:?}");
    assert_eq!(
        queue.counts().await.unwrap().pending,
        0,
        "nothing of a failed batch is sent"
    );

    // At the limits: MAX_HEADERS headers, MAX_HEADERS_BYTES in all, any value.
    let full = (0..MAX_HEADERS).fold(queue.send("full"), |m, i| {
        let value = if i == 0 {
            "v".repeat(MAX_HEADERS_BYTES - 2 * MAX_HEADERS - 4 * (MAX_HEADERS - 1))
        } else {
            "=:#\n".into()
        };
        m.header(format!("h{i:x}"), value)
    });
    let id = full.await.unwrap();
    let got = queue.get(&id).await.unwrap().unwrap();
    assert_eq!(got.headers.len(), MAX_HEADERS);
    assert_eq!(got.payload, b"full");
}
