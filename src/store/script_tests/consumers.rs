//! heartbeat.lua and consumers.lua: the registry of live consumers.

use std::time::Duration;

use crate::registry::{RawEntry, MAX_ENTRY_BYTES};
use crate::store::ops::consumers::{ListConsumers, Listed};
use crate::store::ops::heartbeat::Heartbeat;
use crate::store::{Keys, Op, Shard};

use super::{Env, SLACK_MS};

const TTL: Duration = Duration::from_secs(15);

impl Env {
    fn registry(&self) -> Keys {
        Keys::registry("dq:").unwrap()
    }

    async fn on_registry<O: Op>(&self, op: &O) -> Result<O::Reply, crate::Error> {
        let r = self.registry();
        Shard::new(&self.client, &r, "registry").run(op).await
    }

    async fn beat(&self, id: &str, ttl: Duration, entry: &[u8]) -> u64 {
        self.on_registry(&Heartbeat { id, ttl, entry }).await.unwrap()
    }

    async fn listed(&self) -> Listed {
        let op = ListConsumers {
            limit: 100,
            max_bytes: 64,
        };
        self.on_registry(&op).await.unwrap()
    }
}

fn text(s: &str) -> RawEntry {
    RawEntry::Text(s.as_bytes().to_vec())
}

#[tokio::test]
async fn a_heartbeat_writes_an_entry_with_its_ttl_and_a_stop_removes_it() {
    let env = Env::new().await;
    let r = env.registry();
    let before = env.now_ms();
    assert_eq!(env.beat("c1", TTL, b"one").await, 0);
    let ttl = env.int(&["PTTL", &r.consumer("c1")]);
    assert!((14_000..=15_000).contains(&ttl), "{ttl}");
    let index = env.zset(&r.consumers());
    assert_eq!(index.len(), 1);
    let expiry = before + 15_000;
    assert!(
        (expiry..expiry + SLACK_MS).contains(&index[0].1),
        "{index:?} vs {expiry}"
    );
    assert_eq!(env.listed().await, (1, vec![("c1".into(), text("one"))]));
    // The index lives as long as its longest-lived entry: never shorter.
    let index_ttl = env.int(&["PTTL", &r.consumers()]);
    assert!((14_000..=15_000).contains(&index_ttl), "{index_ttl}");
    env.beat("short", Duration::from_secs(1), b"s").await;
    assert!(env.int(&["PTTL", &r.consumers()]) > 13_000);
    // Idempotent: a repeat rewrites the entry.
    env.beat("c1", TTL, b"two").await;
    assert_eq!(env.listed().await.1[1], ("c1".into(), text("two")));

    env.beat("short", Duration::ZERO, b"").await;
    env.beat("c1", Duration::ZERO, b"").await;
    assert!(!env.exists(&r.consumer("c1")) && !env.exists(&r.consumers()));
    assert_eq!(env.listed().await, (0, vec![]));
}

#[tokio::test]
async fn stale_members_are_never_listed_and_a_heartbeat_prunes_them() {
    let env = Env::new().await;
    let r = env.registry();
    env.beat("live", TTL, b"{}").await;
    // A killed consumer whose time passed, its entry (oddly) still there,
    // and one whose entry expired before its index member was pruned.
    let past = (env.now_ms() - 1).to_string();
    env.raw(&["SET", &r.consumer("dead"), "{}"]);
    env.raw(&["ZADD", &r.consumers(), &past, "dead"]);
    let later = (env.now_ms() + 60_000).to_string();
    env.raw(&["ZADD", &r.consumers(), &later, "gone"]);
    let (live, listed) = env.listed().await;
    assert_eq!(live, 2, "gone's member is ahead of its time");
    assert_eq!(listed, vec![("live".into(), text("{}"))]);
    assert_eq!(env.beat("live", TTL, b"{}").await, 1, "dead pruned");
    let members: Vec<String> = env.zset(&r.consumers()).into_iter().map(|(m, _)| m).collect();
    assert_eq!(members, ["live", "gone"]);
}

#[tokio::test]
async fn long_and_foreign_entries_are_not_read() {
    let env = Env::new().await;
    let r = env.registry();
    env.beat("big", TTL, &[b'x'; 65]).await;
    env.beat("hash", TTL, b"{}").await;
    env.raw(&["DEL", &r.consumer("hash")]);
    env.raw(&["HSET", &r.consumer("hash"), "f", "v"]);
    let (live, mut listed) = env.listed().await;
    listed.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(live, 2);
    assert_eq!(
        listed,
        vec![
            ("big".into(), RawEntry::TooLong(65)),
            ("hash".into(), RawEntry::NotText)
        ]
    );
}

#[tokio::test]
async fn a_heartbeat_refuses_an_entry_over_its_bound() {
    let env = Env::new().await;
    let big = vec![b'x'; MAX_ENTRY_BYTES + 1];
    let op = Heartbeat {
        id: "c",
        ttl: TTL,
        entry: &big,
    };
    let err = env.on_registry(&op).await.unwrap_err();
    assert!(err.to_string().contains("at most 65536 bytes"), "{err}");
    assert!(!env.exists(&env.registry().consumers()));
    env.beat("c", TTL, &big[1..]).await;
}
