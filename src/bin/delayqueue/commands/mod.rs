//! Running the commands: one Redis client, the queue they name, output.
//! A command with more than a few lines has a module of its own.

mod abort;
mod consumers;
mod flow;
mod groups;
mod queues;

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use delayqueue::fred::prelude::{Client, ClientLike};
use delayqueue::{
    find_queues, recorded_shards, DelayQueue, Error, MessageId, MessageState, Misfire, Schedule, ScheduleInfo,
};
use serde_json::{json, Value};

use crate::args::{
    Cli, Command, DeadCommand, DeadTarget, MisfireArg, PageArgs, ScheduleTarget, SchedulesCommand, SendArgs, StatsArgs,
};
use crate::failure::{Failure, NOT_FOUND};
use crate::output::{self, Rates, Table};

/// Runs the command; `Ok` holds the exit code (1 when `check` found anomalies).
pub async fn run(cli: Cli) -> Result<u8, Failure> {
    if let Command::Purge { queue, yes: false } = &cli.command {
        return Err(Failure::usage(format!(
            "purge deletes every message of queue {queue:?} and its totals; pass --yes to do it"
        )));
    }
    let client = connect(&cli.url()).await?;
    let ctx = Ctx {
        client,
        prefix: cli.prefix,
        shards: cli.shards,
        json: cli.json,
    };
    match cli.command {
        Command::Queues(args) => ctx.queues(args).await,
        Command::Consumers { queue } => ctx.consumers(queue).await,
        Command::Stats(args) => ctx.stats(args).await,
        Command::List(args) => ctx.list(&args.queue, args.state.into(), &args.page).await,
        Command::Show { queue, id } => ctx.show(&queue, id.into()).await,
        Command::Send(args) => ctx.send(args).await,
        Command::Cancel { queue, id } => ctx.cancel(&queue, id.into()).await,
        Command::Abort { queue, id } => ctx.abort(&queue, id.into()).await,
        Command::Reschedule { queue, id, delay } => ctx.reschedule(&queue, id, delay).await,
        Command::Dead(DeadCommand::List { queue, page }) => ctx.list(&queue, MessageState::Dead, &page).await,
        Command::Dead(DeadCommand::Requeue(target)) => ctx.dead(target, false).await,
        Command::Dead(DeadCommand::Delete(target)) => ctx.dead(target, true).await,
        Command::Schedules(cmd) => ctx.schedules(cmd).await,
        Command::Groups(cmd) => ctx.groups(cmd).await,
        Command::Flow(cmd) => ctx.flow(cmd).await,
        Command::Pause { queue } => ctx.pause(&queue, true).await,
        Command::Resume { queue } => ctx.pause(&queue, false).await,
        Command::Purge { queue, .. } => ctx.purge(&queue).await,
        Command::Check { queue } => ctx.check(&queue).await,
        Command::Web(args) => crate::web::serve(ctx.client, ctx.prefix, args).await,
    }
}

/// What every command works with.
struct Ctx {
    client: Client,
    prefix: String,
    /// `--shards`; unset: ordinary, or as found in Redis.
    shards: Option<usize>,
    json: bool,
}

impl Ctx {
    /// Queue `name` spread over `shards`.
    fn build(&self, name: &str, shards: usize) -> Result<DelayQueue, Failure> {
        Ok(DelayQueue::builder(name, self.client.clone())
            .key_prefix(self.prefix.as_str())
            .shards(shards)
            .build()?)
    }

    /// Queue `name`, which need not exist yet: with `--shards`, or as found
    /// in Redis, or an ordinary queue.
    async fn queue(&self, name: &str) -> Result<DelayQueue, Failure> {
        match self.shards {
            Some(n) => self.build(name, n),
            None => Ok(self.find(name).await?.unwrap_or(self.build(name, 1)?)),
        }
    }

    /// Queue `name` as found in Redis: with the shard count it records,
    /// else ordinary if it exists as one, else sharded as `find_queues`
    /// sees it (a keyspace scan; a queue sharded by handles that recorded
    /// no count).
    async fn find(&self, name: &str) -> Result<Option<DelayQueue>, Failure> {
        if let Some(n) = recorded_shards(&self.client, &self.prefix, name).await? {
            return Ok(Some(self.build(name, n)?));
        }
        let plain = self.build(name, 1)?;
        if plain.exists().await? {
            return Ok(Some(plain));
        }
        let found = find_queues(&self.client, &self.prefix).await?;
        match found.iter().find(|q| q.name == name) {
            Some(q) => Ok(Some(self.build(name, q.shards)?)),
            None => Ok(None),
        }
    }

    /// Queue `name`, which must exist (have been sent to).
    async fn existing(&self, name: &str) -> Result<DelayQueue, Failure> {
        let queue = self.queue(name).await?;
        if !queue.exists().await? {
            let known: Vec<String> = find_queues(&self.client, &self.prefix)
                .await?
                .into_iter()
                .map(|q| match q.shards {
                    1 => q.name,
                    n => format!("{} ({n} shards)", q.name),
                })
                .collect();
            let known = if known.is_empty() {
                "none".to_string()
            } else {
                known.join(", ")
            };
            return Err(Failure::not_found(format!("no queue named {name:?} (known: {known})")));
        }
        Ok(queue)
    }

    /// Prints `value` as one JSON line, or `text` as is.
    fn print(&self, value: Value, text: impl FnOnce() -> String) -> Result<(), Failure> {
        if self.json {
            write_out(&format!("{value}\n"))
        } else {
            write_out(&text())
        }
    }

    /// Redis's clock, which the queue's times are on.
    async fn redis_now(&self) -> Result<SystemTime, Failure> {
        let reply: Vec<String> = self
            .client
            .custom(fred::cmd!("TIME"), Vec::<String>::new())
            .await
            .map_err(Error::from)?;
        match reply
            .iter()
            .map(|s| s.parse::<u64>())
            .collect::<Result<Vec<_>, _>>()
            .as_deref()
        {
            Ok([secs, micros]) => Ok(UNIX_EPOCH + Duration::from_secs(*secs) + Duration::from_micros(*micros)),
            _ => Err(Failure::usage(format!("unexpected reply to TIME: {reply:?}"))),
        }
    }

    async fn stats(&self, args: StatsArgs) -> Result<u8, Failure> {
        let queue = self.existing(&args.queue).await?;
        if !args.watch {
            let s = queue.status().await?;
            self.print(output::status_json(queue.name(), &s), || {
                output::status_text(queue.name(), &s, None)
            })?;
            return Ok(0);
        }
        tokio::select! {
            done = self.watch(&queue, args.interval, args.count) => done,
            _ = tokio::signal::ctrl_c() => Ok(0),
        }
    }

    /// `stats --watch`: a refresh every `interval`, `count` times or forever.
    async fn watch(&self, queue: &DelayQueue, interval: Duration, count: Option<u64>) -> Result<u8, Failure> {
        let terminal = std::io::stdout().is_terminal();
        let mut last: Option<(Instant, delayqueue::Totals)> = None;
        let mut refreshes = 0u64;
        loop {
            let s = queue.status().await?;
            let at = Instant::now();
            let rates = last.map(|(then, totals)| Rates::between(&totals, &s.totals, at - then));
            last = Some((at, s.totals));
            let now = output::timestamp(SystemTime::now());
            let mut json = output::status_json(queue.name(), &s);
            json["time"] = json!(now);
            json["rates"] = output::rates_json(rates);
            self.print(json, || {
                // Clear the screen on a terminal; else frames follow each other.
                let (clear, gap) = if terminal { ("\x1b[H\x1b[2J", "") } else { ("", "\n") };
                format!(
                    "{clear}{gap}every {}, {now} (Ctrl-C to stop)\n{}",
                    output::duration(interval),
                    output::status_text(queue.name(), &s, Some(rates))
                )
            })?;
            refreshes += 1;
            if count.is_some_and(|n| refreshes >= n) {
                return Ok(0);
            }
            tokio::time::sleep(interval).await;
        }
    }

    async fn list(&self, name: &str, state: MessageState, page: &PageArgs) -> Result<u8, Failure> {
        let queue = self.existing(name).await?;
        let found = queue.list(state, page.offset, page.limit).await?;
        let now = self.redis_now().await?;
        let state_name = state.as_str();
        let json = json!({
            "queue": name,
            "state": state_name,
            "total": found.total,
            "offset": page.offset,
            "next": found.next,
            "items": found.items.iter().map(|m| output::message_json(m, false)).collect::<Vec<_>>(),
        });
        self.print(json, || {
            if found.items.is_empty() {
                return match found.total {
                    0 => format!("no {state_name} messages in {name}\n"),
                    n => format!("no {state_name} messages from offset {} ({n} in all)\n", page.offset),
                };
            }
            let (from, to) = (page.offset + 1, page.offset + found.items.len());
            let mut text = output::list_text(state, &found.items, now);
            text += &format!("\n{from}-{to} of {} {state_name}", found.total);
            if let Some(next) = found.next {
                text += &format!("; next page: --offset {next}");
            }
            text + "\n"
        })?;
        Ok(0)
    }

    async fn show(&self, name: &str, id: MessageId) -> Result<u8, Failure> {
        let queue = self.existing(name).await?;
        let Some(m) = queue.get(&id).await? else {
            // Acked: gone, but for its result while that is kept.
            let Some(result) = queue.result(&id).await? else {
                return Err(Failure::not_found(format!(
                    "no message {:?} in queue {name:?}",
                    id.as_str()
                )));
            };
            self.print(
                json!({"queue": name, "finished": output::result_json(&id, &result)}),
                || output::result_text(&id, &result),
            )?;
            return Ok(0);
        };
        let now = self.redis_now().await?;
        self.print(
            json!({"queue": name, "message": output::message_json(&m, true)}),
            || output::show_text(&m, now),
        )?;
        Ok(0)
    }

    async fn send(&self, args: SendArgs) -> Result<u8, Failure> {
        let queue = self.queue(&args.queue).await?;
        let mut send = match (&args.id, args.replace) {
            (Some(id), true) => queue.replace(id.as_str(), args.payload),
            (Some(id), false) => queue.send(args.payload).id(id.as_str()),
            (None, _) => queue.send(args.payload),
        };
        send = send.priority(args.priority);
        if let Some(d) = args.delay {
            send = send.delay(d);
        }
        if let Some(ttl) = args.unique_for {
            send = send.unique_for(ttl);
        }
        if let Some(window) = args.throttle {
            send = send.throttle(window);
        }
        if let Some(window) = args.debounce {
            send = send.debounce(window);
        }
        if let Some(n) = args.retry_count {
            send = send.retry_count(n);
        }
        if let Some(group) = args.group {
            send = send.group(group);
        }
        for (name, value) in args.headers {
            send = send.header(name, value);
        }
        if !args.after.is_empty() {
            send = send.after(args.after.iter().map(String::as_str));
        }
        let id = send.await?;
        let delay = args.delay.or(args.debounce).unwrap_or_default();
        let json = json!({"queue": queue.name(), "id": id.as_str(), "delay_ms": delay.as_millis() as u64});
        self.print(json, || format!("{id}\n"))?;
        Ok(0)
    }

    async fn cancel(&self, name: &str, id: MessageId) -> Result<u8, Failure> {
        let queue = self.existing(name).await?;
        if !queue.cancel(&id).await? {
            return Err(Failure::not_found(format!(
                "message {:?} not cancelled: queue {name:?} has no such message waiting \
                 (unknown, done, or being processed right now)",
                id.as_str()
            )));
        }
        self.print(json!({"queue": name, "id": id.as_str(), "cancelled": true}), || {
            format!("cancelled {id}\n")
        })?;
        Ok(0)
    }

    async fn reschedule(&self, name: &str, id: String, delay: Duration) -> Result<u8, Failure> {
        let queue = self.existing(name).await?;
        if !queue.reschedule(&id, delay).await? {
            return Err(Failure::not_found(format!(
                "message {:?} not rescheduled: queue {name:?} has no such message pending \
                 (unknown, already due, being processed, or dead)",
                id.as_str()
            )));
        }
        let json = json!({"queue": name, "id": id.as_str(), "rescheduled": true, "delay_ms": delay.as_millis() as u64});
        self.print(json, || {
            format!("rescheduled {id}: due in {}\n", output::duration(delay))
        })?;
        Ok(0)
    }

    async fn schedules(&self, cmd: SchedulesCommand) -> Result<u8, Failure> {
        let now = self.redis_now().await?;
        match cmd {
            SchedulesCommand::List { queue } => {
                let list = self.queue(&queue).await?.schedules().await?;
                let rows: Vec<Value> = list.iter().map(schedule_json).collect();
                self.print(json!(rows), || output::schedules_text(&list, now))?;
                Ok(0)
            }
            SchedulesCommand::Show(t) => match self.queue(&t.queue).await?.schedule(&t.name).await? {
                Some(s) => {
                    self.print(schedule_json(&s), || output::schedule_text(&s, now))?;
                    Ok(0)
                }
                None => Err(Failure::not_found(format!(
                    "queue {:?} has no schedule {:?}",
                    t.queue, t.name
                ))),
            },
            SchedulesCommand::Add(a) => {
                let payload = a.payload.clone();
                let mut s = match (&a.cron, a.every) {
                    (Some(expr), _) => Schedule::cron(expr, payload),
                    (None, Some(every)) => Schedule::every(every, payload),
                    (None, None) => return Err(Failure::usage("give --cron or --every")),
                };
                if let Some(tz) = &a.tz {
                    s = s.timezone(tz);
                }
                if let Some(n) = a.retry_count {
                    s = s.retry_count(n);
                }
                s = s.misfire(match a.misfire {
                    MisfireArg::Skip => Misfire::Skip,
                    MisfireArg::Once => Misfire::FireOnce,
                });
                let changed = self.queue(&a.queue).await?.set_schedule(&a.name, s).await?;
                self.print(
                    json!({"queue": a.queue, "schedule": a.name, "changed": changed}),
                    || {
                        let word = if changed { "set" } else { "unchanged" };
                        format!("{word} {}\n", a.name)
                    },
                )?;
                Ok(0)
            }
            SchedulesCommand::Pause(t) => self.flip_schedule(t, "paused").await,
            SchedulesCommand::Resume(t) => self.flip_schedule(t, "resumed").await,
            SchedulesCommand::Remove(t) => self.flip_schedule(t, "removed").await,
            SchedulesCommand::Trigger(t) => {
                let id = self.queue(&t.queue).await?.trigger_schedule(&t.name).await?;
                self.print(json!({"queue": t.queue, "schedule": t.name, "id": id.as_str()}), || {
                    format!("{id}\n")
                })?;
                Ok(0)
            }
        }
    }

    /// Pauses, resumes or removes a schedule; exit 1 when there is none.
    async fn flip_schedule(&self, t: ScheduleTarget, word: &str) -> Result<u8, Failure> {
        let queue = self.queue(&t.queue).await?;
        let result = match word {
            "paused" => queue.pause_schedule(&t.name).await,
            "resumed" => queue.resume_schedule(&t.name).await,
            _ => match queue.remove_schedule(&t.name).await {
                Ok(false) => Err(Error::NoSuchSchedule {
                    queue: t.queue.clone(),
                    name: t.name.clone(),
                }),
                other => other,
            },
        };
        let changed = match result {
            Err(Error::NoSuchSchedule { .. }) => {
                return Err(Failure::not_found(format!(
                    "queue {:?} has no schedule {:?}",
                    t.queue, t.name
                )))
            }
            other => other?,
        };
        self.print(
            json!({"queue": t.queue, "schedule": t.name, "changed": changed}),
            || {
                let already = if changed { "" } else { " (it already was)" };
                format!("{word} {}{already}\n", t.name)
            },
        )?;
        Ok(0)
    }

    async fn pause(&self, name: &str, pause: bool) -> Result<u8, Failure> {
        let queue = self.existing(name).await?;
        let changed = if pause {
            queue.pause().await?
        } else {
            queue.resume().await?
        };
        let word = if pause { "paused" } else { "resumed" };
        self.print(json!({"queue": name, "paused": pause, "changed": changed}), || {
            let already = if changed { "" } else { " (it already was)" };
            format!("{word} {name}{already}\n")
        })?;
        Ok(0)
    }

    async fn dead(&self, target: DeadTarget, delete: bool) -> Result<u8, Failure> {
        let queue = self.existing(&target.queue).await?;
        let done = match (&target.which.id, delete) {
            (Some(id), false) => u64::from(queue.requeue_dead(id).await?),
            (Some(id), true) => u64::from(queue.delete_dead(id).await?),
            (None, false) => queue.requeue_all_dead().await?,
            (None, true) => queue.delete_all_dead().await?,
        };
        if let (Some(id), 0) = (&target.which.id, done) {
            return Err(Failure::not_found(format!(
                "{id:?} is not a dead letter of queue {:?}",
                target.queue
            )));
        }
        let verb = if delete { "deleted" } else { "requeued" };
        let letters = if done == 1 { "dead letter" } else { "dead letters" };
        self.print(json!({"queue": queue.name(), verb: done}), || {
            format!("{verb} {done} {letters}\n")
        })?;
        Ok(0)
    }

    async fn purge(&self, name: &str) -> Result<u8, Failure> {
        let queue = self.existing(name).await?;
        let removed = queue.purge().await?;
        let entries = if removed == 1 { "entry" } else { "entries" };
        self.print(json!({"queue": name, "removed": removed}), || {
            format!("purged {name}: {removed} {entries} removed\n")
        })?;
        Ok(0)
    }

    async fn check(&self, name: &str) -> Result<u8, Failure> {
        let queue = self.existing(name).await?;
        let report = queue.check_integrity().await?;
        let json = json!({
            "queue": name,
            "scanned": report.scanned,
            "clean": report.is_clean(),
            "anomalies": report.anomalies.iter().map(output::anomaly_json).collect::<Vec<_>>(),
        });
        self.print(json, || {
            let n = report.anomalies.len();
            let mut text = format!("{name}: {} ids scanned, ", report.scanned);
            if n == 0 {
                return text + "clean\n";
            }
            text += &format!("{n} {}\n\n", if n == 1 { "anomaly" } else { "anomalies" });
            let mut t = Table::new(["ANOMALY", "ID", "STATE"]);
            for a in &report.anomalies {
                t.row(output::anomaly_row(a));
            }
            text + &t.render()
        })?;
        Ok(if report.is_clean() { 0 } else { NOT_FOUND })
    }
}

/// How long [`connect`] waits: `delayqueue::connect`'s own 5 s limit, and
/// a little more for it to report. (Against a server that accepts but never
/// answers, it would then wait for its QUIT, up to 10 s more.)
const CONNECT_LIMIT: Duration = Duration::from_millis(5500);

/// `delayqueue::connect`, bounded by [`CONNECT_LIMIT`], with an error that
/// is one readable line and shows no password.
async fn connect(url: &str) -> Result<Client, Failure> {
    let shown = redact(url);
    let why = match tokio::time::timeout(CONNECT_LIMIT, delayqueue::connect(url)).await {
        Ok(Ok(client)) => return Ok(client),
        Ok(Err(Error::Redis(e))) => {
            // fred keeps an I/O error as its Debug text, e.g. `Os { code:
            // 111, kind: ConnectionRefused, message: "Connection refused" }`:
            // keep the message.
            let details = e.details();
            let quoted = ["message: \"", "error: \""]
                .iter()
                .find_map(|start| details.split_once(start)?.1.split_once('"'));
            match quoted {
                Some((message, _)) => message.to_string(),
                None => details.to_string(),
            }
        }
        Ok(Err(e)) => e.to_string(),
        Err(_) => "no answer within 5s".to_string(),
    };
    Err(Failure::usage(format!(
        "cannot connect to Redis at {shown}: {}",
        why.replace(url, &shown)
    )))
}

/// Writes to stdout; a closed stdout (`| head`) ends the command quietly.
fn write_out(text: &str) -> Result<(), Failure> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Err(Failure {
            code: 0,
            message: String::new(),
        }),
        Err(e) => Err(Failure::usage(format!("cannot write to stdout: {e}"))),
    }
}

/// `url` with its user and password replaced by `***`, for error messages.
fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => format!("{scheme}://***{}", &rest[at..]),
        None => url.to_string(),
    }
}

/// A schedule as `--json` prints it; times in ms since the epoch.
fn schedule_json(s: &ScheduleInfo) -> Value {
    let ms = |t: Option<SystemTime>| {
        t.and_then(|t| t.duration_since(UNIX_EPOCH).ok())
            .map(|d| d.as_millis() as u64)
    };
    json!({
        "name": s.name,
        "spec": s.spec,
        "timezone": s.timezone,
        "paused": s.paused,
        "next_fire_ms": ms(s.next_fire),
        "last_fire_ms": ms(s.last_fire),
        "fired": s.fired,
        "misfire": s.misfire.as_str(),
        "misfire_grace_ms": s.misfire_grace.as_millis() as u64,
        "retry_count": s.retry_count,
        "payload": String::from_utf8_lossy(s.payload.as_bytes()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(redact("redis://127.0.0.1:6379"), "redis://127.0.0.1:6379");
        assert_eq!(redact("redis://:secret@h:1/0"), "redis://***@h:1/0");
        assert_eq!(redact("rediss://user:p@ss@h/x@y"), "rediss://***@h/x@y");
        assert_eq!(redact("nonsense"), "nonsense");
    }
}
