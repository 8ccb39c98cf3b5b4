//! `queues`: one page of the queues under the prefix, in name order, with
//! their counts. The names come from one `find_queues`; the statuses of
//! the page's queues are read [`CONCURRENCY`] at a time.

use futures::StreamExt;
use serde_json::json;

use super::Ctx;
use crate::args::QueuesArgs;
use crate::failure::Failure;
use crate::output::{self, Table};
use delayqueue::{find_queues, FoundQueue};

/// Status reads in flight at once.
const CONCURRENCY: usize = 64;

/// The queues of the page `args` asks for among `found` (in name order):
/// those starting with `--search`, after `--after`, at most `--limit`;
/// with the number that match and the position of the first.
fn page<'a, T>(found: &'a [T], name: fn(&T) -> &str, args: &QueuesArgs) -> (&'a [T], usize, usize) {
    let search = args.search.as_deref().unwrap_or_default();
    let from = found.partition_point(|q| name(q) < search);
    let matching = &found[from..];
    let matching = &matching[..matching.partition_point(|q| name(q).starts_with(search))];
    let skip = args
        .after
        .as_deref()
        .map_or(0, |after| matching.partition_point(|q| name(q) <= after));
    let rest = &matching[skip..];
    (&rest[..rest.len().min(args.limit)], matching.len(), skip)
}

impl Ctx {
    pub(super) async fn queues(&self, args: QueuesArgs) -> Result<u8, Failure> {
        let found = find_queues(&self.client, &self.prefix).await?;
        let (shown, total, skipped) = page(&found, |q: &FoundQueue| q.name.as_str(), &args);
        let statuses: Vec<_> = futures::stream::iter(shown)
            .map(|q| async move { self.build(&q.name, q.shards)?.status().await.map_err(Failure::from) })
            .buffered(CONCURRENCY)
            .collect()
            .await;
        let statuses = statuses.into_iter().collect::<Result<Vec<_>, _>>()?;
        let next = (skipped + shown.len() < total)
            .then(|| shown.last().map(|q| q.name.clone()))
            .flatten();
        let json = json!({
            "queues": shown.iter().zip(&statuses)
                .map(|(q, s)| json!({"name": q.name, "shards": q.shards, "paused": s.paused, "counts": output::counts_json(&s.counts)}))
                .collect::<Vec<_>>(),
            "total": total,
            "next": next,
        });
        self.print(json, || {
            if shown.is_empty() {
                return match (total, &args.search) {
                    (0, None) => format!("no queues under prefix {:?}\n", self.prefix),
                    (0, Some(search)) => format!("no queue name starts with {search:?}\n"),
                    (n, _) => format!(
                        "no queues after {:?} ({n} in all)\n",
                        args.after.as_deref().unwrap_or_default()
                    ),
                };
            }
            let mut t = Table::new([
                "QUEUE",
                "SHARDS",
                "PAUSED",
                "PENDING",
                "READY",
                "PROCESSING",
                "RETRY",
                "DEAD",
            ]);
            for (q, s) in shown.iter().zip(&statuses) {
                let c = &s.counts;
                t.row([
                    q.name.clone(),
                    q.shards.to_string(),
                    if s.paused { "yes" } else { "no" }.to_string(),
                    c.pending.to_string(),
                    c.ready.to_string(),
                    c.processing.to_string(),
                    c.retry.to_string(),
                    c.dead.to_string(),
                ]);
            }
            let mut text = t.render();
            if let Some(next) = &next {
                let (from, to) = (skipped + 1, skipped + shown.len());
                text += &format!("\n{from}-{to} of {total} queues; next page: --after {next}\n");
            }
            text
        })?;
        Ok(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(limit: usize, after: Option<&str>, search: Option<&str>) -> QueuesArgs {
        QueuesArgs {
            limit,
            after: after.map(String::from),
            search: search.map(String::from),
        }
    }

    #[test]
    fn a_page_is_a_window_of_the_names_after_a_cursor() {
        let found = ["a", "a*", "ab", "b", "ba", "c"];
        let names = |a: QueuesArgs| {
            let (shown, total, skipped) = page(&found, |n: &&str| n, &a);
            (shown.to_vec(), total, skipped)
        };
        assert_eq!(names(args(2, None, None)), (vec!["a", "a*"], 6, 0));
        assert_eq!(names(args(2, Some("a*"), None)), (vec!["ab", "b"], 6, 2));
        // A name that is not there: the page starts after where it would be.
        assert_eq!(names(args(2, Some("aa"), None)), (vec!["ab", "b"], 6, 2));
        assert_eq!(names(args(9, Some("c"), None)), (vec![], 6, 6));
        assert_eq!(names(args(9, None, Some("b"))), (vec!["b", "ba"], 2, 0));
        assert_eq!(names(args(9, Some("b"), Some("b"))), (vec!["ba"], 2, 1));
        // A literal prefix: no glob.
        assert_eq!(names(args(9, None, Some("a*"))), (vec!["a*"], 1, 0));
        assert_eq!(names(args(9, None, Some("*"))), (vec![], 0, 0));
    }
}
