//! get.lua: finding one message in any state.

use std::time::Duration;

use crate::MessageState;

use super::{seed_processing, Env, RETRY};

#[tokio::test]
async fn get_finds_a_message_in_every_state() {
    let env = Env::new().await;
    let k = env.k().clone();
    env.send("p", "pay", 60_000, 5_000, RETRY).await;
    env.seed("rd", None);
    env.raw(&["RPUSH", &k.ready, "rd"]);
    env.seed("rt", Some("1:oops"));
    env.raw(&["RPUSH", &k.retry, "rt"]);
    let lease = seed_processing(&env, "u", "2");
    env.seed("g", Some("4:timeout"));
    env.bury(&["g"]);
    let get = |id: &'static str| {
        let queue = env.queue.clone();
        async move { queue.get(id).await }
    };
    let p = get("p").await.unwrap().unwrap();
    assert_eq!(
        (p.state, p.payload.as_slice(), p.attempts),
        (MessageState::Pending, &b"pay"[..], 0)
    );
    // Live: no TTL; its expire_after deadline is due + 5 s.
    assert_eq!(p.expires_in, None);
    assert_eq!(p.due.unwrap() + Duration::from_secs(5), p.expires_at.unwrap());
    assert_eq!(get("rd").await.unwrap().unwrap().state, MessageState::Ready);
    let rt = get("rt").await.unwrap().unwrap();
    assert_eq!(
        (rt.state, rt.last_error.as_deref()),
        (MessageState::Retry, Some("oops"))
    );
    let u = get("u").await.unwrap().unwrap();
    assert_eq!((u.state, u.attempts), (MessageState::Processing, 2));
    let until = u.lease_until.unwrap().duration_since(std::time::UNIX_EPOCH).unwrap();
    assert_eq!(until.as_micros() as i64, lease);
    let g = get("g").await.unwrap().unwrap();
    assert_eq!(
        (g.state, g.deliveries_left(), g.last_error.as_deref()),
        (MessageState::Dead, Some(0), Some("timeout"))
    );
    assert!(g.dead_since.is_some());
    assert!(get("nope").await.unwrap().is_none());
}
