//! The command line: global options, subcommands and their arguments.

use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use delayqueue::{MessageState, RateLimit, MAX_PAGE};

const AFTER_HELP: &str = "\
Exit status:
  0  success
  1  the command ran, but found nothing or something wrong: unknown queue,
     message not found, not cancelled, not rescheduled, not a dead letter,
     duplicate id, integrity anomalies
  2  usage error, invalid queue name or message id, Redis unreachable or
     another Redis error, purge without --yes

Errors are one line on stderr, also with --json. JSON output is one object
per line; docs/cli.md lists its fields. Times in human output are relative
to Redis's clock.";

/// The Redis of `--url` when neither it nor `REDIS_URL` is given.
const DEFAULT_URL: &str = "redis://127.0.0.1:6379";

/// Inspect and operate delayqueue queues stored in Redis.
#[derive(Debug, Parser)]
#[command(name = "delayqueue", version, after_help = AFTER_HELP)]
pub struct Cli {
    /// Redis to talk to (redis://, rediss://, redis-cluster://,
    /// redis-sentinel://) [default: $REDIS_URL, else redis://127.0.0.1:6379]
    // Not clap's `env`: clap puts an argument taken from the environment
    // into every usage line, where it reads as required.
    #[arg(long, global = true)]
    url: Option<String>,
    /// Key prefix of the queues (the builder's `key_prefix`).
    #[arg(long, global = true, default_value = "dq:")]
    pub prefix: String,
    /// Shards of the queue (the builder's `shards`); unset: the count the
    /// queue records in Redis, else an ordinary queue.
    #[arg(long, global = true)]
    pub shards: Option<usize>,
    /// Print JSON (one object per line) instead of tables.
    #[arg(long, global = true)]
    pub json: bool,
    #[command(subcommand)]
    pub command: Command,
}

impl Cli {
    /// `--url`, else `$REDIS_URL` (when set and not empty), else [`DEFAULT_URL`].
    pub fn url(&self) -> String {
        self.url
            .clone()
            .or_else(|| std::env::var("REDIS_URL").ok().filter(|u| !u.is_empty()))
            .unwrap_or_else(|| DEFAULT_URL.to_string())
    }
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// List the queues under the prefix, with their counts, a page at a time.
    Queues(QueuesArgs),
    /// The live consumers: host, pid, queues, and the messages their handlers run now.
    Consumers {
        /// Only the consumers of this queue.
        #[arg(long)]
        queue: Option<String>,
    },
    /// Counts per state, latency, oldest dead letter, totals; --watch refreshes them with rates.
    Stats(StatsArgs),
    /// One page of the messages in a state.
    List(ListArgs),
    /// Every field of one message, with its whole payload.
    Show {
        /// The queue's name.
        queue: String,
        /// The message's id.
        id: String,
    },
    /// Send a message; prints its id.
    Send(SendArgs),
    /// Cancel a message that waits (pending, ready, retry or dead); exit 1 when not cancelled.
    Cancel {
        /// The queue's name.
        queue: String,
        /// The message's id.
        id: String,
    },
    /// Abort a message: cancelled if it waits, else its handler is told and it ends as aborted
    Abort {
        /// The queue's name.
        queue: String,
        /// The message's id.
        id: String,
    },
    /// Move a pending message's due time to --delay from now; exit 1 when it is not pending.
    Reschedule {
        /// The queue's name.
        queue: String,
        /// The message's id.
        id: String,
        /// Due after this long from now, e.g. 0s (now), 1500ms, 5m, 1h.
        #[arg(long, short, value_parser = humantime::parse_duration)]
        delay: Duration,
    },
    /// Dead letters: messages that used up their deliveries.
    #[command(subcommand)]
    Dead(DeadCommand),
    /// Pause a queue for every consumer: they lease nothing new (sends still succeed).
    Pause {
        /// The queue's name.
        queue: String,
    },
    /// Resume a paused queue: consumers lease again at once.
    Resume {
        /// The queue's name.
        queue: String,
    },
    /// Repeating schedules of a queue (cron or interval), fired by its consumers.
    #[command(subcommand)]
    Schedules(SchedulesCommand),
    /// A queue's groups (docs/groups.md): list them, show, pause, resume or limit one.
    #[command(subcommand)]
    Groups(GroupsCommand),
    /// Flows (docs/workflows.md): the tree of messages a message is part of.
    #[command(subcommand)]
    Flow(FlowCommand),
    /// Serve the web dashboard and Prometheus /metrics of every queue under the prefix.
    Web(WebArgs),
    /// Delete every message of a queue and its totals.
    Purge {
        /// The queue's name.
        queue: String,
        /// Confirm: without it purge refuses (exit 2).
        #[arg(long)]
        yes: bool,
    },
    /// Check a queue's keys for inconsistencies; exit 1 when anomalies are found.
    Check {
        /// The queue's name.
        queue: String,
    },
}

#[derive(Debug, Args)]
pub struct StatsArgs {
    /// The queue's name.
    pub queue: String,
    /// Refresh until Ctrl-C (or --count refreshes), with rates per second.
    #[arg(long, short)]
    pub watch: bool,
    /// Time between refreshes, e.g. 500ms, 2s.
    #[arg(long, default_value = "1s", value_parser = parse_interval, requires = "watch")]
    pub interval: Duration,
    /// Stop after this many refreshes.
    #[arg(long, requires = "watch", value_parser = clap::value_parser!(u64).range(1..))]
    pub count: Option<u64>,
}

#[derive(Debug, Args)]
pub struct WebArgs {
    /// Address to serve on; one that is not loopback needs --token or --basic.
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub listen: String,
    /// Show only: refuse every action (send, cancel, requeue, pause, ...).
    #[arg(long)]
    pub read_only: bool,
    /// Require this bearer token [default: $DELAYQUEUE_WEB_TOKEN]; a
    /// browser opens the dashboard once with ?token=<token>.
    #[arg(long, conflicts_with = "basic")]
    pub token: Option<String>,
    /// Require HTTP basic auth with USER:PASSWORD [default: $DELAYQUEUE_WEB_BASIC].
    #[arg(long, value_name = "USER:PASSWORD")]
    pub basic: Option<String>,
    /// Also answer to this host name (`name` or `name:port`), e.g. the name
    /// a reverse proxy serves the dashboard under; repeatable. Without auth
    /// only loopback names and the --listen address are answered.
    #[arg(long, value_name = "HOST")]
    pub allowed_host: Vec<String>,
}

#[derive(Debug, Args)]
pub struct ListArgs {
    /// The queue's name.
    pub queue: String,
    pub state: State,
    #[command(flatten)]
    pub page: PageArgs,
}

/// Most queues one page of `queues` shows.
pub const MAX_QUEUES_PAGE: usize = 10_000;

#[derive(Debug, Args)]
pub struct QueuesArgs {
    /// Most queues to show (1 to 10000), in name order.
    #[arg(long, short = 'n', default_value_t = 100, value_parser = parse_queues_limit)]
    pub limit: usize,
    /// Show the queues whose names come after this one (the "next page" hint gives it).
    #[arg(long, value_name = "QUEUE")]
    pub after: Option<String>,
    /// Only the queues whose names start with this text (no wildcards).
    #[arg(long, value_name = "TEXT")]
    pub search: Option<String>,
}

#[derive(Debug, Args)]
pub struct PageArgs {
    /// Most messages to show (1 to 1000).
    #[arg(long, short = 'n', default_value_t = 20, value_parser = parse_limit)]
    pub limit: usize,
    /// Position of the first message to show (the "next page" hint gives it).
    #[arg(long, default_value_t = 0)]
    pub offset: usize,
}

#[derive(Debug, Args)]
pub struct SendArgs {
    /// The queue's name.
    pub queue: String,
    /// The payload, sent as its UTF-8 bytes.
    pub payload: String,
    /// Due after this long, e.g. 1500ms, 5s, 2m, 1h, 7d (default 0s; with --replace: the due time kept).
    #[arg(long, short, value_parser = humantime::parse_duration)]
    pub delay: Option<Duration>,
    /// Use this id instead of a generated one (a second send with it fails while the first waits).
    #[arg(long)]
    pub id: Option<String>,
    /// Refuse a second send of --id while its message is live and this long after it finished (docs/dedup.md).
    #[arg(long, value_parser = humantime::parse_duration, requires = "id", group = "dedup")]
    pub unique_for: Option<Duration>,
    /// Refuse every send of --id but the first within this window (docs/dedup.md).
    #[arg(long, value_parser = humantime::parse_duration, requires = "id", group = "dedup")]
    pub throttle: Option<Duration>,
    /// Due this long from now; a send of --id while it is pending replaces it and moves it so (docs/dedup.md).
    #[arg(long, value_parser = humantime::parse_duration, requires = "id", group = "dedup", conflicts_with = "delay")]
    pub debounce: Option<Duration>,
    /// Replace the payload of the pending message --id (exit 1 when it is not pending).
    #[arg(long, requires = "id", group = "dedup")]
    pub replace: bool,
    /// Retries after a failed delivery (default: the library's, 3).
    #[arg(long)]
    pub retry_count: Option<u32>,
    /// Priority, 0 (default, lowest) to 9: among due messages, higher first.
    #[arg(long, default_value_t = 0)]
    pub priority: u8,
    /// The message's group, e.g. a tenant (docs/groups.md).
    #[arg(long)]
    pub group: Option<String>,
    /// A header, NAME=VALUE; repeat for more.
    #[arg(long = "header", short = 'H', value_parser = parse_header)]
    pub headers: Vec<(String, String)>,
    /// Wait until message ID of the same queue finished (docs/workflows.md); repeat for more.
    #[arg(long, value_name = "ID", conflicts_with = "dedup")]
    pub after: Vec<String>,
}

#[derive(Debug, Subcommand)]
pub enum FlowCommand {
    /// The flow a message is part of, as a tree from its root: each message's state, queue and id; exit 1 if none.
    Show {
        /// The queue's name.
        queue: String,
        /// The message's id: any message of the flow.
        id: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum SchedulesCommand {
    /// Every schedule of the queue with its next fire time.
    List {
        /// The queue's name.
        queue: String,
    },
    /// One schedule, with its payload.
    Show(ScheduleTarget),
    /// Create or replace a schedule (exit 0; "unchanged" when it was so already).
    Add(AddScheduleArgs),
    /// Pause a schedule: its fires sent ahead are withdrawn, it fires nothing.
    Pause(ScheduleTarget),
    /// Resume a paused schedule from now.
    Resume(ScheduleTarget),
    /// Remove a schedule; exit 1 when there is none.
    Remove(ScheduleTarget),
    /// Send one fire of a schedule now; prints its message id.
    Trigger(ScheduleTarget),
}

#[derive(Debug, Subcommand)]
pub enum GroupsCommand {
    /// One page of the queue's groups, in name order: counts, own limits, paused.
    List {
        /// The queue's name.
        queue: String,
        #[command(flatten)]
        page: PageArgs,
    },
    /// Pause a group for every consumer: its messages wait, the other groups' go on.
    Pause(GroupTarget),
    /// Resume a paused group: its due messages are claimed again at once.
    Resume(GroupTarget),
    /// One group: its counts, limits (its own or the defaults), paused, wait; exit 1 if unknown.
    Show(GroupTarget),
    /// Set or reset a group's concurrency and rate; a reset falls back to the queue's defaults.
    Limit(GroupLimitArgs),
}

#[derive(Debug, Args)]
#[command(group(
    clap::ArgGroup::new("change")
        .required(true)
        .multiple(true)
        .args(["concurrency", "no_concurrency", "rate", "no_rate"])
))]
pub struct GroupLimitArgs {
    #[command(flatten)]
    pub target: GroupTarget,
    /// The most messages of the group processing at once (1: ordered).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..), conflicts_with = "no_concurrency")]
    pub concurrency: Option<u64>,
    /// Drop the group's own concurrency: the default applies.
    #[arg(long)]
    pub no_concurrency: bool,
    /// At most N starts of the group in any window of DURATION, as N/DURATION, e.g. 10/1s.
    #[arg(long, value_parser = parse_rate, conflicts_with = "no_rate")]
    pub rate: Option<RateLimit>,
    /// Drop the group's own rate: the default applies.
    #[arg(long)]
    pub no_rate: bool,
}

#[derive(Debug, Args)]
pub struct GroupTarget {
    /// The queue's name.
    pub queue: String,
    /// The group's name.
    pub group: String,
}

#[derive(Debug, Args)]
pub struct ScheduleTarget {
    /// The queue's name.
    pub queue: String,
    /// The schedule's name.
    pub name: String,
}

#[derive(Debug, Args)]
pub struct AddScheduleArgs {
    /// The queue's name.
    pub queue: String,
    /// The schedule's name.
    pub name: String,
    /// Each fire's payload.
    pub payload: String,
    /// A cron expression, 5 fields or 6 with seconds first, e.g. "0 9 * * MON-FRI".
    #[arg(long, conflicts_with = "every", required_unless_present = "every")]
    pub cron: Option<String>,
    /// A fixed interval, e.g. 30s, 5m.
    #[arg(long, value_parser = humantime::parse_duration)]
    pub every: Option<Duration>,
    /// IANA time zone of the cron expression (default UTC).
    #[arg(long)]
    pub tz: Option<String>,
    /// Retries of each fire's message (default: the library's, 3).
    #[arg(long)]
    pub retry_count: Option<u32>,
    /// Fires missed by more than a minute: skip them, or send one (default).
    #[arg(long, value_enum, default_value = "once")]
    pub misfire: MisfireArg,
}

/// `--misfire` on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum MisfireArg {
    Skip,
    Once,
}

#[derive(Debug, Subcommand)]
pub enum DeadCommand {
    /// List dead letters (same as `list <queue> dead`).
    List {
        /// The queue's name.
        queue: String,
        #[command(flatten)]
        page: PageArgs,
    },
    /// Move dead letters back to ready, with their retries restored.
    // clap would list the group first: `<ID|--all> <QUEUE>`.
    #[command(override_usage = "delayqueue dead requeue [OPTIONS] <QUEUE> <ID|--all>")]
    Requeue(DeadTarget),
    /// Delete dead letters.
    #[command(override_usage = "delayqueue dead delete [OPTIONS] <QUEUE> <ID|--all>")]
    Delete(DeadTarget),
}

#[derive(Debug, Args)]
pub struct DeadTarget {
    /// The queue's name.
    pub queue: String,
    #[command(flatten)]
    pub which: Which,
}

/// One dead letter or all of them: one of the two is required, and usage
/// lines say so (`<ID|--all>`).
#[derive(Debug, Args)]
#[group(required = true, multiple = false)]
pub struct Which {
    /// One dead letter; exit 1 when it is not one.
    pub id: Option<String>,
    /// Every dead letter of the queue.
    #[arg(long)]
    pub all: bool,
}

/// A state on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum State {
    Pending,
    Ready,
    Processing,
    Retry,
    #[value(alias = "garbage")]
    Dead,
}

impl From<State> for MessageState {
    fn from(s: State) -> Self {
        match s {
            State::Pending => MessageState::Pending,
            State::Ready => MessageState::Ready,
            State::Processing => MessageState::Processing,
            State::Retry => MessageState::Retry,
            State::Dead => MessageState::Dead,
        }
    }
}

fn parse_header(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(name, value)| (name.to_string(), value.to_string()))
        .ok_or_else(|| format!("{s:?} is not NAME=VALUE"))
}

fn parse_limit(s: &str) -> Result<usize, String> {
    parse_up_to(s, MAX_PAGE)
}

fn parse_queues_limit(s: &str) -> Result<usize, String> {
    parse_up_to(s, MAX_QUEUES_PAGE)
}

/// A number from 1 to `max`.
fn parse_up_to(s: &str, max: usize) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if (1..=max).contains(&n) => Ok(n),
        _ => Err(format!("must be a number from 1 to {max}")),
    }
}

/// A rate as `N/DURATION`, e.g. `10/1s`.
fn parse_rate(s: &str) -> Result<RateLimit, String> {
    let (n, per) = s
        .split_once('/')
        .ok_or_else(|| format!("{s:?} is not N/DURATION, e.g. 10/1s"))?;
    let n = n.parse().map_err(|_| format!("{n:?} is not a whole number"))?;
    let per = humantime::parse_duration(per).map_err(|e| e.to_string())?;
    Ok(RateLimit::new(n, per))
}

fn parse_interval(s: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(s).map_err(|e| e.to_string())?;
    if d < Duration::from_millis(10) {
        return Err("must be at least 10ms".into());
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn durations_and_limits() {
        let d = |s| humantime::parse_duration(s).unwrap();
        assert_eq!(d("5s"), Duration::from_secs(5));
        assert_eq!(d("1500ms"), Duration::from_millis(1500));
        assert_eq!(d("2m"), Duration::from_secs(120));
        assert_eq!(d("1h"), Duration::from_secs(3600));
        assert_eq!(d("7d"), Duration::from_secs(7 * 86400));
        assert!(parse_interval("1ms").is_err());
        assert!(parse_limit("0").is_err() && parse_limit("1001").is_err());
        assert_eq!(parse_limit("1000"), Ok(1000));
    }
}
