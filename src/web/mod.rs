//! The web dashboard (feature `web`): an [`axum::Router`] that shows every
//! queue under a key prefix, pages through and searches its messages,
//! acts on them (send, cancel, reschedule, run now, requeue or delete dead
//! letters) and serves Prometheus metrics at `/metrics`. Mount it in an
//! axum service under any path, or run it with `delayqueue web`.
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use delayqueue::web::{Auth, Dashboard};
//!
//! let client = delayqueue::connect("redis://127.0.0.1:6379").await?;
//! let dashboard = Dashboard::new(client)
//!     .auth(Auth::Bearer("secret".into()))
//!     .router()?;
//! // nest_service (not nest) serves both /admin/queues and /admin/queues/.
//! let app = axum::Router::new().nest_service("/admin/queues", dashboard);
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
//! axum::serve(listener, app).await?;
//! # Ok(()) }
//! ```
//!
//! What each page costs in Redis calls (docs/web.md, "Performance"): the
//! overview one `TIME` and one status script per shard of each queue on
//! its page (50 by default, at most 200), sorted and searched on the
//! server; a queue one status per shard; a page of messages one script
//! call (one more per shard on a sharded queue); `/metrics` one status per
//! shard of every queue. The listing of queues the overview pages through
//! comes from a `SCAN` of the keyspace, one script call per ordinary queue
//! found (its shard count) and one status per shard of every queue (the
//! counts it sorts by): read at the first request and again in the
//! background at most every 30 s while someone looks at the overview.
//! A sampler reads the status of the queues a page showed lately every
//! 10 s for the rates and their 15-minute history; it starts with the
//! first request and stops when the router is dropped.

mod api;
mod assets;
mod auth;
mod background;
mod csrf;
mod host;
mod json;
mod metrics;
mod registry;
mod sampler;
mod state;

pub use auth::Auth;

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::routing::get;
use fred::prelude::Client;

use crate::{DelayQueue, Error};
use host::Hosts;
use registry::Registry;
use sampler::Sampler;
use state::{App, ProcessMetrics};

/// Builds the dashboard's router; every method takes and returns the builder.
///
/// ```no_run
/// # async fn run(client: delayqueue::fred::clients::Client, orders: delayqueue::DelayQueue) {
/// use delayqueue::web::{Auth, Dashboard};
/// let app: axum::Router = Dashboard::new(client)
///     .key_prefix("dq:")
///     .read_only(true)
///     .auth(Auth::Basic { user: "ops".into(), password: "secret".into() })
///     .queue(&orders)
///     .router()
///     .expect("no secret is empty");
/// # let _ = app;
/// # }
/// ```
#[derive(Debug, Clone)]
#[must_use = "call .router() to get the dashboard"]
pub struct Dashboard {
    client: Client,
    prefix: String,
    read_only: bool,
    auth: Auth,
    allowed_hosts: Vec<String>,
    queues: Vec<DelayQueue>,
    sample_every: Duration,
    process_metrics: Option<ProcessMetrics>,
    group_metrics: usize,
}

/// Samples of rates kept: 15 minutes at the default 10 s.
const HISTORY_SAMPLES: usize = 90;

impl Dashboard {
    /// A dashboard of the queues `client` reaches, under prefix `"dq:"`,
    /// without authentication, not read-only.
    pub fn new(client: Client) -> Self {
        Dashboard {
            client,
            prefix: "dq:".into(),
            read_only: false,
            auth: Auth::None,
            allowed_hosts: Vec::new(),
            queues: Vec::new(),
            sample_every: Duration::from_secs(10),
            process_metrics: None,
            group_metrics: metrics::DEFAULT_GROUP_METRICS,
        }
    }

    /// The key prefix of the queues to show (the builder's
    /// [`key_prefix`](crate::DelayQueueBuilder::key_prefix)). Default `"dq:"`.
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// When `true`, every action (a `POST`) is refused with 403: the
    /// dashboard only shows. Default `false`.
    pub fn read_only(mut self, read_only: bool) -> Self {
        self.read_only = read_only;
        self
    }

    /// Who may use the dashboard; checked on every route. Default [`Auth::None`].
    pub fn auth(mut self, auth: Auth) -> Self {
        self.auth = auth;
        self
    }

    /// Names (`name`, any port, or `name:port`) the dashboard answers to
    /// besides the loopback names `localhost`, `127.0.0.1` and `[::1]`: the
    /// names a reverse proxy or the browser use for it. A request whose
    /// `Host`, or `X-Forwarded-Host` when a proxy sets it, is neither gets
    /// 403, which keeps a DNS-rebinding page of another site from using a
    /// dashboard without authentication. With [`auth`](Self::auth) set, any
    /// name is answered unless allowed hosts are given (a rebound page has
    /// no credentials). May be called again to add more.
    ///
    /// ```no_run
    /// # fn run(client: delayqueue::fred::clients::Client) -> Result<(), delayqueue::Error> {
    /// // Behind a proxy serving https://queues.internal.example/ .
    /// let app = delayqueue::web::Dashboard::new(client)
    ///     .allowed_hosts(["queues.internal.example"])
    ///     .router()?;
    /// # let _ = app;
    /// # Ok(()) }
    /// ```
    pub fn allowed_hosts<S: Into<String>>(mut self, hosts: impl IntoIterator<Item = S>) -> Self {
        self.allowed_hosts.extend(hosts.into_iter().map(Into::into));
        self
    }

    /// Acts on this queue through the application's own handle, so its
    /// [`events`](DelayQueue::events) and metrics see what the dashboard
    /// does, and shows it even before it holds a message. Other queues
    /// under the prefix are found in Redis.
    pub fn queue(mut self, queue: &DelayQueue) -> Self {
        self.queues.retain(|q| q.name() != queue.name());
        self.queues.push(queue.clone());
        self
    }

    /// How often the rates are sampled; the history keeps the last 90
    /// samples (15 minutes at the default 10 s). At least 100 ms.
    pub fn sample_every(mut self, every: Duration) -> Self {
        self.sample_every = every.max(Duration::from_millis(100));
        self
    }

    /// Appends what `render` returns, Prometheus text from the
    /// application's `metrics` recorder, to `/metrics`: the process-side
    /// metrics the library records (handler durations, lateness, leases,
    /// ...; [`describe_metrics`](crate::describe_metrics) gives them their
    /// `# HELP` and units) next to the queue-wide ones read from Redis.
    /// Called once per scrape.
    ///
    /// ```no_run
    /// # fn run(client: delayqueue::fred::clients::Client) -> Result<(), Box<dyn std::error::Error>> {
    /// // With metrics-exporter-prometheus as the application's recorder:
    /// let handle = metrics_exporter_prometheus::PrometheusBuilder::new().install_recorder()?;
    /// delayqueue::describe_metrics();
    /// let app = delayqueue::web::Dashboard::new(client)
    ///     .process_metrics(move || handle.render())
    ///     .router()?;
    /// # let _ = app;
    /// # Ok(()) }
    /// ```
    pub fn process_metrics(mut self, render: impl Fn() -> String + Send + Sync + 'static) -> Self {
        self.process_metrics = Some(ProcessMetrics(Arc::new(render)));
        self
    }

    /// How many groups of each queue get gauges of their own in `/metrics`:
    /// the `top` with the most due messages (ties by name), so the label
    /// cardinality stays bounded however many groups there are. Default
    /// 10; 0 leaves them out. Each scrape reads at most the first 10,000
    /// known groups of a queue, in pages of 1,000 (one bounded script call
    /// each, docs/groups.md).
    ///
    /// ```no_run
    /// # fn run(client: delayqueue::fred::clients::Client) -> Result<(), delayqueue::Error> {
    /// let app = delayqueue::web::Dashboard::new(client).group_metrics(25).router()?;
    /// # let _ = app;
    /// # Ok(()) }
    /// ```
    pub fn group_metrics(mut self, top: usize) -> Self {
        self.group_metrics = top;
        self
    }

    /// The router: serve it, or nest it under a path of your service.
    /// Fails with [`Error::InvalidArgument`] when a secret of the
    /// [`auth`](Self::auth) is empty or an allowed host is not a host name.
    pub fn router(self) -> Result<axum::Router, Error> {
        self.auth.validate()?;
        let hosts = Hosts::new(&self.allowed_hosts, !matches!(self.auth, Auth::None))?;
        Ok(self.build(hosts))
    }

    fn build(self, hosts: Hosts) -> axum::Router {
        let app = Arc::new(App {
            registry: Registry::new(self.client.clone(), self.prefix, self.queues, registry::REFRESH),
            sampler: Sampler::new(self.sample_every, HISTORY_SAMPLES),
            client: self.client,
            read_only: self.read_only,
            csrf: uuid::Uuid::new_v4().simple().to_string(),
            process_metrics: self.process_metrics,
            group_metrics: self.group_metrics,
            background: OnceLock::new(),
        });
        axum::Router::new()
            .route("/", get(assets::index))
            .route("/assets/{file}", get(assets::file))
            .route("/metrics", get(metrics::metrics))
            .nest("/api", api::routes())
            .with_state(app.clone())
            .layer(axum::middleware::from_fn_with_state(app, csrf::check))
            .layer(axum::middleware::from_fn_with_state(Arc::new(self.auth), auth::check))
            .layer(axum::middleware::from_fn_with_state(Arc::new(hosts), host::check))
    }
}

/// [`Dashboard::new(client).router()`](Dashboard::router): every queue
/// under `"dq:"`, no authentication (so loopback names only), actions
/// allowed. Cannot fail: it has no secret and no allowed host to check.
///
/// ```no_run
/// # async fn run(client: delayqueue::fred::clients::Client) {
/// let app: axum::Router = axum::Router::new().nest_service("/admin/queues", delayqueue::web::router(client));
/// # let _ = app;
/// # }
/// ```
pub fn router(client: Client) -> axum::Router {
    Dashboard::new(client).build(Hosts::open_loopback())
}
