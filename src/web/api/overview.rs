//! `GET /api/overview`: one page of the queues, sorted and searched on the
//! server from the registry's listing, each with its status read now and
//! its rates: one `TIME` plus one status script per shard of each queue on
//! the page.

use std::cmp::Reverse;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use axum::extract::{Extension, Query, State};
use fred::prelude::ClientLike;

use super::error::{ApiError, ApiResult};
use crate::web::auth::User;
use crate::web::json::{epoch_ms, OverviewJson, QueueJson};
use crate::web::registry::{statuses, Listed};
use crate::web::state::App;
use crate::{Counts, DelayQueue, Error, MessageState, QueueStatus};

/// The longest search: the longest queue name (`MAX_QUEUE_NAME_LEN`,
/// which the tests check; the store layer defines it, out of this layer's reach).
const MAX_SEARCH: usize = 128;

/// Most queues one page holds.
pub(crate) const MAX_LIMIT: usize = 200;
const DEFAULT_LIMIT: usize = 50;

/// What the queues of a page are sorted by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sort {
    Name,
    /// Messages not yet done ([`Counts::live`]): pending, ready,
    /// processing and retry.
    Backlog,
    State(MessageState),
}

impl Sort {
    const NAMES: &'static str = "backlog, name, pending, ready, processing, retry or dead";

    fn parse(s: &str) -> Option<Sort> {
        match s {
            "name" => Some(Sort::Name),
            "backlog" => Some(Sort::Backlog),
            state => state.parse().ok().map(Sort::State),
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Sort::Name => "name",
            Sort::Backlog => "backlog",
            Sort::State(s) => s.as_str(),
        }
    }

    fn count(self, c: &Counts) -> u64 {
        match self {
            Sort::Name => 0,
            Sort::Backlog => c.live(),
            Sort::State(state) => c.of(state),
        }
    }
}

/// A query parameter of the overview that is not what it must be: 400,
/// with the parameter named in the reply's `param`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ParamError {
    #[error("limit must be a whole number from 1 to {MAX_LIMIT}")]
    Limit,
    #[error("offset must be a whole number, 0 or more")]
    Offset,
    #[error("search must be at most {MAX_SEARCH} bytes: it is the start of a queue name")]
    SearchTooLong,
    #[error("unknown sort: {}", Sort::NAMES)]
    Sort,
    #[error("unknown order: asc or desc")]
    Order,
}

impl ParamError {
    fn param(&self) -> &'static str {
        match self {
            ParamError::Limit => "limit",
            ParamError::Offset => "offset",
            ParamError::SearchTooLong => "search",
            ParamError::Sort => "sort",
            ParamError::Order => "order",
        }
    }
}

impl From<ParamError> for ApiError {
    fn from(e: ParamError) -> Self {
        ApiError::bad(e.to_string()).param(e.param())
    }
}

/// What a request asks for, checked.
#[derive(Debug, PartialEq)]
struct Page {
    search: String,
    sort: Sort,
    desc: bool,
    offset: usize,
    limit: usize,
}

impl Page {
    /// Defaults: the largest backlog first, from the start, 50 queues, no search.
    fn parse(query: &HashMap<String, String>) -> Result<Page, ParamError> {
        let get = |k: &str| query.get(k).map(String::as_str);
        let search = get("search").unwrap_or_default();
        if search.len() > MAX_SEARCH {
            return Err(ParamError::SearchTooLong);
        }
        let sort = Sort::parse(get("sort").unwrap_or("backlog")).ok_or(ParamError::Sort)?;
        let desc = match get("order") {
            None => sort != Sort::Name,
            Some("asc") => false,
            Some("desc") => true,
            Some(_) => return Err(ParamError::Order),
        };
        let offset = get("offset").map_or(Ok(0), |o| o.parse().map_err(|_| ParamError::Offset))?;
        let limit = match get("limit") {
            None => DEFAULT_LIMIT,
            Some(l) => l
                .parse()
                .ok()
                .filter(|l| (1..=MAX_LIMIT).contains(l))
                .ok_or(ParamError::Limit)?,
        };
        Ok(Page {
            search: search.to_string(),
            sort,
            desc,
            offset,
            limit,
        })
    }

    /// The queues of this page among `matching` (in name order), sorted
    /// by the listing's counts; ties in name order.
    fn of<'a>(&self, matching: &'a [Listed]) -> Vec<&'a Listed> {
        let mut sorted: Vec<&Listed> = matching.iter().collect();
        if self.sort != Sort::Name {
            // A stable sort keeps ties in name order.
            let sort = self.sort;
            if self.desc {
                sorted.sort_by_key(|q| Reverse(sort.count(&q.counts)));
            } else {
                sorted.sort_by_key(|q| sort.count(&q.counts));
            }
        } else if self.desc {
            sorted.reverse();
        }
        sorted.into_iter().skip(self.offset).take(self.limit).collect()
    }
}

pub(crate) async fn overview(
    State(app): State<Arc<App>>,
    Extension(user): Extension<User>,
    Query(query): Query<HashMap<String, String>>,
) -> ApiResult<OverviewJson> {
    let page = Page::parse(&query)?;
    crate::web::background::start(&app);
    let listing = app.registry.listing().await?;
    let matching = listing.starting_with(&page.search);
    let shown = page.of(matching);
    app.sampler.watch(shown.iter().map(|q| q.name.as_str()));
    let handles: Vec<DelayQueue> = shown
        .iter()
        .filter_map(|q| app.registry.handle(&q.name, q.shards).ok())
        .collect();
    let (now, statuses) = tokio::join!(redis_now(&app), statuses(handles));
    let statuses = statuses
        .into_iter()
        .map(|(q, s)| Ok::<_, Error>((q, s?)))
        .collect::<Result<Vec<_>, _>>()?;
    // The listing's counts, but those of the page as read now.
    let held = |c: &Counts| c.live() + c.dead;
    let messages = matching.iter().map(|q| held(&q.counts)).sum::<u64>()
        - shown.iter().map(|q| held(&q.counts)).sum::<u64>()
        + statuses.iter().map(|(_, s)| held(&s.counts)).sum::<u64>();
    let queues = statuses.iter().map(|(q, s)| queue_json(&app, q, s)).collect();
    Ok(axum::Json(OverviewJson {
        read_only: app.read_only,
        csrf: app.csrf.clone(),
        user: user.0,
        now_ms: now?,
        total: matching.len(),
        messages,
        listed_ms_ago: u64::try_from(listing.at.elapsed().as_millis()).unwrap_or(u64::MAX),
        search: page.search,
        sort: page.sort.as_str(),
        order: if page.desc { "desc" } else { "asc" },
        offset: page.offset,
        limit: page.limit,
        queues,
    }))
}

/// A queue's JSON from its status, with the sampler's rates.
pub(crate) fn queue_json(app: &App, q: &DelayQueue, s: &QueueStatus) -> QueueJson {
    QueueJson {
        name: q.name().to_string(),
        shards: q.shards(),
        status: s.into(),
        rates: app.sampler.rates(q.name()).into(),
        shard_status: None,
    }
}

/// Redis's clock, which the queue's times are on, in ms since the epoch.
async fn redis_now(app: &App) -> Result<u64, ApiError> {
    let reply: Vec<u64> = app
        .client
        .custom(fred::cmd!("TIME"), Vec::<String>::new())
        .await
        .map_err(Error::from)?;
    match reply[..] {
        [secs, micros] => Ok(epoch_ms(
            UNIX_EPOCH + Duration::from_secs(secs) + Duration::from_micros(micros),
        )),
        _ => Err(Error::Internal(format!("unexpected reply to TIME: {reply:?}")).into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn listed(name: &str, pending: u64, dead: u64) -> Listed {
        let mut counts = Counts::default();
        (counts.pending, counts.dead) = (pending, dead);
        Listed {
            name: name.into(),
            shards: 1,
            counts,
        }
    }

    #[test]
    fn bad_parameters_are_refused_by_name() {
        let bad = |pairs: &[(&str, &str)]| Page::parse(&query(pairs)).unwrap_err();
        assert_eq!(bad(&[("limit", "0")]), ParamError::Limit);
        assert_eq!(bad(&[("limit", "201")]), ParamError::Limit);
        assert_eq!(bad(&[("limit", "99999999999999999999999")]), ParamError::Limit);
        assert_eq!(bad(&[("limit", "-1")]), ParamError::Limit);
        assert_eq!(bad(&[("offset", "-1")]), ParamError::Offset);
        assert_eq!(bad(&[("offset", "1e3")]), ParamError::Offset);
        assert_eq!(bad(&[("sort", "counts.pending")]), ParamError::Sort);
        assert_eq!(bad(&[("order", "up")]), ParamError::Order);
        assert_eq!(MAX_SEARCH, crate::MAX_QUEUE_NAME_LEN);
        assert_eq!(
            bad(&[("search", &"a".repeat(MAX_SEARCH + 1))]),
            ParamError::SearchTooLong
        );
        let long = "a".repeat(1 << 20);
        assert_eq!(bad(&[("search", &long)]), ParamError::SearchTooLong);
        assert_eq!(
            ApiError::from(ParamError::Limit).status(),
            axum::http::StatusCode::BAD_REQUEST
        );
        let page = Page::parse(&query(&[])).unwrap();
        assert_eq!(
            (page.sort, page.desc, page.offset, page.limit),
            (Sort::Backlog, true, 0, DEFAULT_LIMIT)
        );
        assert!(!Page::parse(&query(&[("sort", "name")])).unwrap().desc);
    }

    #[test]
    fn pages_sort_by_counts_with_ties_by_name_and_search_is_a_literal_prefix() {
        let listing = crate::web::registry::Listing {
            at: std::time::Instant::now(),
            queues: vec![
                listed("a*", 0, 0),
                listed("ab", 5, 1),
                listed("b", 5, 0),
                listed("c", 9, 3),
                listed("d", 1, 0),
            ],
        };
        let names = |pairs: &[(&str, &str)]| {
            let page = Page::parse(&query(pairs)).unwrap();
            page.of(listing.starting_with(&page.search))
                .iter()
                .map(|q| q.name.clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(names(&[]), ["c", "ab", "b", "d", "a*"]);
        assert_eq!(names(&[("limit", "2"), ("offset", "1")]), ["ab", "b"]);
        assert_eq!(names(&[("offset", "5")]), Vec::<String>::new());
        assert_eq!(names(&[("offset", "18446744073709551615")]), Vec::<String>::new());
        assert_eq!(
            names(&[("sort", "backlog"), ("order", "asc")]),
            ["a*", "d", "ab", "b", "c"]
        );
        assert_eq!(names(&[("sort", "dead")]), ["c", "ab", "a*", "b", "d"]);
        assert_eq!(
            names(&[("sort", "name"), ("order", "desc")]),
            ["d", "c", "b", "ab", "a*"]
        );
        assert_eq!(names(&[("search", "a")]), ["ab", "a*"]);
        // Glob and regex characters are plain characters.
        assert_eq!(names(&[("search", "a*")]), ["a*"]);
        assert_eq!(names(&[("search", ".*")]), Vec::<String>::new());
        assert_eq!(names(&[("search", "zz")]), Vec::<String>::new());
    }
}
