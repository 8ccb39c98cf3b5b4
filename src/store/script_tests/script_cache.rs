//! Scripts loaded again after SCRIPT FLUSH.

use crate::store::scripts;
use crate::store::scripts::LuaScript;
use crate::Counts;

use super::{Env, NEVER, RETRY};

#[tokio::test]
async fn scripts_are_reloaded_after_script_flush() {
    let env = Env::new().await;
    let loaded = |script: &LuaScript| env.raw(&["SCRIPT", "EXISTS", script.sha1()]) == "1";
    let claim_src = &scripts::CLAIM;
    assert_eq!(env.stats().await, vec![0, 0, 0, 0, 0]);
    assert_eq!(env.send("a", "x", 0, NEVER, RETRY).await, 1);
    assert!(loaded(&scripts::SEND));

    assert_eq!(env.raw(&["SCRIPT", "FLUSH"]), "OK");
    assert!(!loaded(&scripts::SEND));
    assert_eq!(env.promote(10).await[0], 1);
    assert_eq!(env.raw(&["SCRIPT", "FLUSH"]), "OK");
    assert!(!loaded(claim_src));
    let c = env.claim(10).await;
    assert_eq!(c.ids(), vec!["a"]);
    assert!(loaded(claim_src), "claim was loaded again");
    assert_eq!(env.raw(&["SCRIPT", "FLUSH"]), "OK");
    assert_eq!(env.ack(&[("a", c.lease)]).await, vec![1]);
    // The public API too.
    assert_eq!(env.raw(&["SCRIPT", "FLUSH"]), "OK");
    assert_eq!(env.queue.counts().await.unwrap(), Counts::default());
    assert!(loaded(&scripts::STATS));
}
