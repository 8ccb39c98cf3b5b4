//! Reading a flow as a tree (docs/workflows.md, "Reading a flow"):
//! `DelayQueue::flow` from any of its messages shows the way up to the
//! root and the tree below it across queues, with each node's state and
//! outcome; a node lists at most `FLOW_PAGE` children and says how many
//! more, `flow_children` pages through all of them; the tree stops at
//! `FLOW_TREE_NODES`; bad input is a typed error.

mod helpers;
use delayqueue_test_support as support;

use std::collections::BTreeMap;
use std::time::Duration;

use delayqueue::{
    ChildOutcome, DelayQueue, Error, Flow, FlowNode, HandlerError, Message, MessageState, NewMessage, FLOW_PAGE,
    FLOW_TREE_NODES,
};
use helpers::start_queues;
use support::{wait_for, WAIT};

const FETCH: Duration = Duration::from_millis(100);
const HOUR: Duration = Duration::from_secs(3600);

/// `(queue, id)` of each of `nodes`.
fn names(nodes: &[FlowNode]) -> Vec<(String, String)> {
    nodes.iter().map(|n| (n.queue.clone(), n.id.to_string())).collect()
}

fn pair(queue: &str, id: &str) -> (String, String) {
    (queue.to_string(), id.to_string())
}

/// Every child of `id`, page after page, by id.
async fn all_children(q: &DelayQueue, id: &str) -> BTreeMap<String, FlowNode> {
    let mut all = BTreeMap::new();
    let mut cursor: Option<String> = None;
    for _ in 0..100 {
        let page = q.flow_children(id, cursor.take()).await.unwrap();
        assert!(page.items.len() <= FLOW_PAGE, "{} in a page", page.items.len());
        all.extend(page.items.into_iter().map(|c| (c.id.to_string(), c)));
        match page.next {
            Some(next) => cursor = Some(next),
            None => return all,
        }
    }
    panic!("the children of {id} did not end in 100 pages");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flow_reads_as_a_tree_from_any_of_its_messages_across_queues() {
    let (_server, _client, qs) = start_queues(&["orders", "mail"], FETCH).await;
    let (orders, mail) = (&qs[0], &qs[1]);
    // ledger-1 is due in an hour: email-1 keeps waiting for it.
    Flow::new(orders, NewMessage::new("close").id("close-1"))
        .child(Flow::new(orders, NewMessage::new("charge").id("charge-1").delay(HOUR)))
        .child(
            Flow::new(mail, NewMessage::new("email").id("email-1"))
                .child(Flow::new(mail, NewMessage::new("render").id("render-1")))
                .child(Flow::new(orders, NewMessage::new("ledger").id("ledger-1").delay(HOUR))),
        )
        .send()
        .await
        .unwrap();

    // Opened from a leaf: the way up, then the whole tree from the root.
    let tree = orders.flow("ledger-1").await.unwrap().expect("a flow");
    assert_eq!((tree.queue.as_str(), tree.id.as_str()), ("orders", "ledger-1"));
    let up: Vec<_> = tree.path.iter().map(|p| pair(&p.queue, p.id.as_str())).collect();
    assert_eq!(up, [pair("mail", "email-1"), pair("orders", "close-1")]);
    assert_eq!(tree.parents.len(), 1);
    assert_eq!(tree.parents[0].id.as_str(), "email-1");
    let root = &tree.root;
    assert_eq!((root.id.as_str(), root.state), ("close-1", Some(MessageState::Waiting)));
    assert_eq!((root.unfinished, root.finished, root.more()), (2, 0, 0));
    assert!(!tree.truncated);
    let mut kids = names(&root.children);
    kids.sort();
    assert_eq!(kids, [pair("mail", "email-1"), pair("orders", "charge-1")]);
    let email = root.children.iter().find(|c| c.id.as_str() == "email-1").unwrap();
    assert_eq!(email.state, Some(MessageState::Waiting));
    let charge = root.children.iter().find(|c| c.id.as_str() == "charge-1").unwrap();
    assert_eq!(
        (charge.state, charge.outcome, charge.next.as_deref()),
        (Some(MessageState::Pending), None, None)
    );
    assert_eq!(email.children.len(), 2);

    // render-1 is acked with a result: email-1 records it, still waiting for ledger-1.
    let consumer = mail
        .start_consume(|msg: Message| async move { Ok::<_, HandlerError>(msg.payload().to_vec()) })
        .await
        .unwrap();
    let finished = wait_for(WAIT, || async {
        let tree = mail.flow("email-1").await.unwrap();
        tree.is_some_and(|t| {
            t.root
                .children
                .iter()
                .any(|c| c.id.as_str() == "email-1" && c.finished == 1)
        })
    })
    .await;
    assert!(finished, "render-1's completion did not reach email-1");
    consumer.shutdown().await.unwrap();
    let tree = mail.flow("email-1").await.unwrap().unwrap();
    assert_eq!(tree.root.id.as_str(), "close-1");
    let email = &tree.root.children.iter().find(|c| c.id.as_str() == "email-1").unwrap();
    // Those it waits for first, then the finished ones.
    assert_eq!(
        names(&email.children),
        [pair("orders", "ledger-1"), pair("mail", "render-1")]
    );
    let (ledger, render) = (&email.children[0], &email.children[1]);
    assert_eq!((ledger.state, ledger.outcome), (Some(MessageState::Pending), None));
    assert_eq!(
        (render.state, render.outcome, render.has_result),
        (None, Some(ChildOutcome::Acked), true)
    );

    // A finished child no longer knows its parent; an unknown id is no flow.
    assert_eq!(mail.flow("render-1").await.unwrap(), None);
    assert_eq!(orders.flow("nope").await.unwrap(), None);
    // A message in no flow is a root alone.
    orders.send("alone").id("alone-1").await.unwrap();
    let alone = orders.flow("alone-1").await.unwrap().unwrap();
    assert!(alone.path.is_empty() && alone.root.children.is_empty() && alone.root.next.is_none());

    assert!(matches!(orders.flow("a b").await, Err(Error::InvalidMessageId { .. })));
    assert!(matches!(
        orders.flow_children("a b", None).await,
        Err(Error::InvalidMessageId { .. })
    ));
    for bad in ["", "x", "u0", "uz.1", "f1.-1"] {
        assert!(
            matches!(
                orders.flow_children("close-1", Some(bad.to_string())).await,
                Err(Error::InvalidArgument(_))
            ),
            "cursor {bad:?} accepted"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parent_lists_a_page_of_its_children_and_pages_through_the_rest() {
    let (_server, _client, qs) = start_queues(&["pp", "pc"], FETCH).await;
    let (p, c) = (&qs[0], &qs[1]);
    // 150 children due in an hour (unfinished: more than a small set's
    // 128, so its scan goes by cursor), 27 due now (acked).
    let (late, now) = (150, 27);
    let mut flow = Flow::new(p, NewMessage::new("parent").id("parent"));
    for i in 0..late {
        flow = flow.child(Flow::new(
            c,
            NewMessage::new("late").id(format!("late-{i:03}")).delay(HOUR),
        ));
    }
    for i in 0..now {
        flow = flow.child(Flow::new(c, NewMessage::new("now").id(format!("now-{i:02}"))));
    }
    flow.send().await.unwrap();
    let consumer = c
        .start_consume(|_msg: Message| async move { Ok::<_, HandlerError>(()) })
        .await
        .unwrap();
    let acked = wait_for(WAIT, || async {
        p.flow("parent").await.unwrap().is_some_and(|t| t.root.finished == now)
    })
    .await;
    assert!(acked, "the acked children's completions did not reach the parent");
    consumer.shutdown().await.unwrap();

    let root = p.flow("parent").await.unwrap().unwrap().root;
    assert_eq!((root.unfinished, root.finished), (late, now));
    assert_eq!(root.children.len(), FLOW_PAGE);
    assert_eq!(root.more(), late + now - FLOW_PAGE as u64);
    assert!(root.next.is_some());
    // Those it waits for come first.
    assert!(root.children.iter().all(|c| c.outcome.is_none()));

    let all = all_children(p, "parent").await;
    assert_eq!(all.len() as u64, late + now, "{:?}", all.keys());
    for (id, child) in &all {
        let expect = if id.starts_with("late") {
            (Some(MessageState::Pending), None)
        } else {
            (None, Some(ChildOutcome::Acked))
        };
        assert_eq!((child.state, child.outcome), expect, "{id}");
        assert_eq!(child.queue, "pc");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tree_stops_at_its_node_bound() {
    let (_server, _client, qs) = start_queues(&["big"], FETCH).await;
    let q = &qs[0];
    // 1 + 12 + 12 * 50 = 613 nodes, more than FLOW_TREE_NODES.
    let mut flow = Flow::new(q, NewMessage::new("root").id("root"));
    for m in 0..12 {
        let mut mid = Flow::new(q, NewMessage::new("mid").id(format!("mid-{m:02}")));
        for l in 0..50 {
            mid = mid.child(Flow::new(
                q,
                NewMessage::new("leaf").id(format!("leaf-{m:02}-{l:02}")).delay(HOUR),
            ));
        }
        flow = flow.child(mid);
    }
    flow.send().await.unwrap();
    let tree = q.flow("leaf-03-07").await.unwrap().unwrap();
    assert_eq!(tree.root.id.as_str(), "root");
    assert!(tree.truncated);
    fn count(n: &FlowNode) -> usize {
        1 + n.children.iter().map(count).sum::<usize>()
    }
    assert_eq!(count(&tree.root), FLOW_TREE_NODES);
    assert_eq!(tree.root.children.len(), 12);
    let unlisted: Vec<_> = tree.root.children.iter().filter(|m| m.children.is_empty()).collect();
    assert!(!unlisted.is_empty());
    assert!(unlisted.iter().all(|m| m.unfinished == 50 && m.next.is_some()));
}

/// A cohort's member is a child of both callbacks: the tree follows the
/// first and names the other; an open cohort's close is no child.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cohort_member_shows_both_callbacks_and_the_open_cohort_counts_its_members_only() {
    let (_server, _client, qs) = start_queues(&["imports"], FETCH).await;
    let q = &qs[0];
    let cohort = q
        .cohort()
        .id("import-7")
        .on_complete(NewMessage::new("finished"))
        .on_success(NewMessage::new("succeeded"))
        .open()
        .await
        .unwrap();
    for row in ["row-1", "row-2"] {
        cohort.send(NewMessage::new("row").id(row).delay(HOUR)).await.unwrap();
    }
    let tree = q.flow("row-1").await.unwrap().unwrap();
    let mut parents: Vec<_> = tree.parents.iter().map(|p| (p.id.to_string(), p.policy)).collect();
    parents.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        parents,
        [
            ("import-7:complete".to_string(), delayqueue::ChildPolicy::Ignore),
            ("import-7:success".to_string(), delayqueue::ChildPolicy::Remove),
        ]
    );
    assert_eq!(tree.path.len(), 1);
    assert_eq!(tree.root.id, tree.path[0].id);
    assert_eq!(
        (tree.root.state, tree.root.unfinished),
        (Some(MessageState::Waiting), 2)
    );
    assert_eq!(
        names(&tree.root.children),
        [pair("imports", "row-1"), pair("imports", "row-2")]
    );
}
