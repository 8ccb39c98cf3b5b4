//! Repeating schedules against a real redis-server: every fire delivered
//! exactly once by any number of schedulers across their restarts and
//! Redis's (AOF), none early, none missing; misfire policies; changes
//! withdraw the fires sent ahead; sharded queues; a producer-only
//! scheduler (`run_schedules`).

mod helpers;
use delayqueue_test_support as support;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use delayqueue::fred::prelude::SortedSetsInterface;
use delayqueue::{Consumer, Counts, DelayQueue, Message, MessageState, Misfire, Schedule};
use helpers::{queue_builder, start_queue, wait_stats};
use support::{wait_for, RedisServer, ServerOptions, WAIT};

const FETCH: Duration = Duration::from_millis(200);

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as i64
}

/// The fire time in a fire's id `{<name>}@<ms>`.
fn fire_ms(id: &str) -> i64 {
    id.rsplit_once('@')
        .and_then(|(_, ms)| ms.parse().ok())
        .unwrap_or_else(|| panic!("not a fire id: {id}"))
}

/// Every delivery: (id, when the handler ran by this host's clock, ms).
#[derive(Clone, Default)]
struct Seen(Arc<Mutex<Vec<(String, i64)>>>);

impl Seen {
    fn handler(&self) -> impl delayqueue::Handler {
        let seen = self.clone();
        move |msg: Message| {
            seen.0.lock().unwrap().push((msg.id().as_str().to_string(), now_ms()));
            async move { Ok(()) }
        }
    }

    /// Deliveries per fire time.
    fn by_fire(&self) -> BTreeMap<i64, Vec<i64>> {
        let mut out: BTreeMap<i64, Vec<i64>> = BTreeMap::new();
        for (id, at) in self.0.lock().unwrap().iter() {
            out.entry(fire_ms(id)).or_default().push(*at);
        }
        out
    }
}

/// One scheduler instance: its own client, queue handle and consumer.
struct Instance {
    queue: DelayQueue,
    consumer: Option<Consumer>,
}

impl Instance {
    /// Starts like an application would: sets its schedule, then consumes.
    async fn start(server: &RedisServer, seen: &Seen) -> Instance {
        let client = server.client().await;
        let queue = queue_builder("cron", &client, FETCH).build().unwrap();
        let mut tries = 0;
        // Redis may be restarting.
        while let Err(e) = queue.set_schedule("tick", tick()).await {
            tries += 1;
            assert!(tries < 100, "set_schedule: {e}");
            tokio::time::sleep(FETCH).await;
        }
        let consumer = queue.start_consume(seen.handler()).await.unwrap();
        Instance {
            queue,
            consumer: Some(consumer),
        }
    }

    async fn stop(&mut self) {
        if let Some(c) = self.consumer.take() {
            c.shutdown().await.unwrap();
        }
    }
}

fn tick() -> Schedule {
    Schedule::every(Duration::from_secs(1), "tick")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_schedulers_send_each_fire_once_across_their_restarts_and_redis_restarts() {
    let mut server = RedisServer::start_with(ServerOptions::durable()).await;
    let seen = Seen::default();
    let set_at = now_ms();
    let mut instances = Vec::new();
    for _ in 0..3 {
        instances.push(Instance::start(&server, &seen).await);
    }
    let info = instances[0].queue.schedule("tick").await.unwrap().expect("set");
    assert_eq!(info.spec, "every 1000");
    // 66 s of fires; every 6 s one instance restarts, every third time Redis too.
    let started = Instant::now();
    let (mut restarts, mut redis_restarts) = (0, 0);
    for round in 1..=11u32 {
        let at = Duration::from_secs(6 * u64::from(round));
        support::wait_until(at + WAIT, || started.elapsed() >= at).await;
        let i = round as usize % 3;
        instances[i].stop().await;
        if round % 3 == 0 {
            server.restart().await;
            redis_restarts += 1;
        }
        instances[i] = Instance::start(&server, &seen).await;
        restarts += 1;
    }
    // Stop the schedule; fires after the pause are withdrawn.
    let before_pause = now_ms();
    assert!(instances[0].queue.pause_schedule("tick").await.unwrap());
    let after_pause = now_ms();
    let delivered_up_to = |t: i64| {
        let by_fire = seen.by_fire();
        by_fire.range(..=t).count() >= ((t - set_at) / 1000 - 1) as usize
    };
    assert!(
        wait_for(WAIT, || async { delivered_up_to(before_pause) }).await,
        "{:?}",
        seen.by_fire()
    );
    // The queue drains: nothing of the schedule is left anywhere.
    let queue = instances[0].queue.clone();
    assert_eq!(wait_stats(&queue, WAIT, Counts::default()).await, Counts::default());
    for i in instances.iter_mut() {
        i.stop().await;
    }

    let by_fire = seen.by_fire();
    let fires: Vec<i64> = by_fire.keys().copied().collect();
    let twice: Vec<_> = by_fire.iter().filter(|(_, d)| d.len() != 1).collect();
    assert!(twice.is_empty(), "fires delivered more than once: {twice:?}");
    let early: Vec<_> = by_fire.iter().filter(|(f, d)| d[0] < **f).collect();
    assert!(early.is_empty(), "fires handled before their time: {early:?}");
    // Every second from the first fire (at most 1 s after the set) to the pause.
    let first = fires[0];
    assert!(
        first > set_at - 1000 && first <= set_at + 2000,
        "first fire {first}, set at {set_at}"
    );
    let gaps: Vec<_> = fires.windows(2).filter(|w| w[1] - w[0] != 1000).collect();
    assert!(gaps.is_empty(), "missing fires between {gaps:?}");
    let last = *fires.last().unwrap();
    assert!(
        last >= before_pause - 1000 && last <= after_pause + 1000,
        "last fire {last}, paused between {before_pause} and {after_pause}"
    );
    assert!(fires.len() >= 60, "{} fires", fires.len());
    let late = by_fire
        .values()
        .map(|d| d[0])
        .zip(&fires)
        .map(|(h, f)| h - f)
        .max()
        .unwrap();
    println!(
        "{} fires, each once; {restarts} scheduler restarts, {redis_restarts} Redis restarts; latest handled {late} ms after its fire time",
        fires.len()
    );
    let info = queue.schedule("tick").await.unwrap().unwrap();
    assert!(info.paused && info.next_fire.is_none());
    assert!(info.fired >= fires.len() as u64, "{info:?}");
}

fn ms(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH).unwrap().as_millis() as i64
}

/// The fires of schedule `name` stored in the queue, by fire time, with
/// their due time (ms). With no consumer running nothing promotes or
/// takes them, so this is every fire sent.
async fn stored_fires(queue: &DelayQueue, name: &str) -> BTreeMap<i64, i64> {
    let prefix = format!("{{{name}}}@");
    let mut out = BTreeMap::new();
    for state in [MessageState::Pending, MessageState::Ready] {
        let page = queue.list(state, 0, 1000).await.unwrap();
        assert!(page.next.is_none(), "more than a page of {state:?}");
        for m in page.items {
            if let Some(at) = m.id.as_str().strip_prefix(&prefix).and_then(|t| t.parse().ok()) {
                let due = m.due.map(ms).expect("a waiting message has a due time");
                assert!(out.insert(at, due).is_none(), "fire {at} stored twice");
            }
        }
    }
    out
}

/// Schedule `name`'s last fire sent (ms), 0 before any.
async fn last_fire(queue: &DelayQueue, name: &str) -> i64 {
    let info = queue.schedule(name).await.unwrap().expect("the schedule");
    info.last_fire.map_or(0, ms)
}

const GRACE: Duration = Duration::from_secs(2);

/// A 1 s schedule with `policy` and a 2 s grace, fed by a producer-only
/// scheduler, then no scheduler at all for 7 s, then one again. Returns
/// the fires stored, the last fire sent before the outage, and the
/// fires sent after it: (fire time, due time).
async fn outage(policy: Misfire) -> (BTreeMap<i64, i64>, i64, Vec<(i64, i64)>) {
    let (_server, _client, queue) = start_queue("misfire", FETCH, |b| b).await;
    let schedule = Schedule::every(Duration::from_secs(1), "m")
        .misfire(policy)
        .misfire_grace(GRACE);
    assert!(queue.set_schedule("m", schedule).await.unwrap());
    let scheduler = queue.run_schedules();
    assert!(
        wait_for(WAIT, || async { stored_fires(&queue, "m").await.len() >= 2 }).await,
        "fires before the outage: {:?}",
        stored_fires(&queue, "m").await
    );
    scheduler.shutdown().await.unwrap();
    let last = last_fire(&queue, "m").await;
    let before = stored_fires(&queue, "m").await;
    assert_eq!(before.keys().last(), Some(&last), "{before:?}");

    // Nothing runs: the fires of these 7 s pass unsent.
    let outage_end = last + 7000;
    assert!(support::wait_until(WAIT, || now_ms() >= outage_end).await);
    assert_eq!(stored_fires(&queue, "m").await, before, "sent while no scheduler ran");
    assert_eq!(
        last_fire(&queue, "m").await,
        last,
        "the cursor moved while no scheduler ran"
    );

    let restart = now_ms();
    let scheduler = queue.run_schedules();
    assert!(
        wait_for(WAIT, || async { last_fire(&queue, "m").await > restart }).await,
        "no fire after the restart: {:?}",
        stored_fires(&queue, "m").await
    );
    scheduler.shutdown().await.unwrap();
    let all = stored_fires(&queue, "m").await;
    let info = queue.schedule("m").await.unwrap().unwrap();
    assert_eq!(info.fired, all.len() as u64, "fires counted vs stored: {all:?}");
    let after: Vec<(i64, i64)> = all.range(last + 1..).map(|(f, d)| (*f, *d)).collect();
    for w in before.keys().collect::<Vec<_>>().windows(2) {
        assert_eq!(w[1] - w[0], 1000, "a gap before the outage: {before:?}");
    }
    (all, last, after)
}

/// The fires `after` sent by the tick at Redis time `tick` (the due time
/// of a fire sent late) from `first` on: late ones within the grace due
/// at the tick, then one a second, each due at its time, with no gap.
fn assert_within_grace_from(after: &[(i64, i64)], tick: i64) {
    let (first, _) = after[0];
    // The first fire not missed by more than the grace at the tick (the
    // scheduler read the time a few ms before fire.lua stored it).
    assert!(
        first + 100 >= tick - GRACE.as_millis() as i64 && first - 1000 < tick - GRACE.as_millis() as i64,
        "first fire within the grace {first}, tick at {tick}: {after:?}"
    );
    assert!(first < tick, "no late fire was sent within the grace: {after:?}");
    for w in after.windows(2) {
        assert_eq!(w[1].0 - w[0].0, 1000, "a gap within the grace: {after:?}");
    }
    for &(f, due) in after {
        assert!(
            due >= f && due <= f.max(tick) + 100,
            "fire {f} due {due}, tick at {tick}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn misfire_skip_sends_no_fire_missed_by_more_than_the_grace() {
    let (all, last, after) = outage(Misfire::Skip).await;
    assert!(after.len() >= 2, "{all:?}");
    // The first fire sent after the outage was late: due at the tick.
    let tick = after[0].1;
    assert!(after[0].0 < tick, "{after:?}");
    assert!(after[0].0 >= last + 3000, "misfires sent: {after:?} after {last}");
    assert_within_grace_from(&after, tick);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn misfire_fire_once_sends_the_first_missed_fire_once_then_the_grace() {
    let (all, last, after) = outage(Misfire::FireOnce).await;
    assert!(after.len() >= 3, "{all:?}");
    // The first missed fire, due at the tick; the other misfires skipped.
    let (missed, tick) = after[0];
    assert_eq!(missed, last + 1000, "{after:?}");
    assert!(tick >= last + 7000, "misfire due {tick}, outage until {}", last + 7000);
    assert!(after[1].0 >= last + 3000, "more than one misfire sent: {after:?}");
    assert_within_grace_from(&after[1..], tick);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_schedules_alone_sends_each_fire_once_ahead_of_its_time() {
    let (_server, client, queue) = start_queue("producer", FETCH, |b| b).await;
    let set_at = now_ms();
    assert!(queue
        .set_schedule("p", Schedule::every(Duration::from_secs(1), "p"))
        .await
        .unwrap());
    // Two producer-only schedulers, as two producer processes would run.
    let other = queue_builder("producer", &client, FETCH).build().unwrap();
    let (a, b) = (queue.run_schedules(), other.run_schedules());
    assert!(
        wait_for(WAIT, || async { stored_fires(&queue, "p").await.len() >= 4 }).await,
        "{:?}",
        stored_fires(&queue, "p").await
    );
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
    let fires = stored_fires(&queue, "p").await;
    let info = queue.schedule("p").await.unwrap().unwrap();
    assert_eq!(info.fired, fires.len() as u64, "a fire sent twice: {info:?} {fires:?}");
    let first = *fires.keys().next().unwrap();
    assert!(
        first > set_at && first <= set_at + 2000,
        "first fire {first}, set at {set_at}"
    );
    for (f, due) in &fires {
        assert_eq!(f, due, "a fire sent ahead is due at its fire time");
    }
    let times: Vec<i64> = fires.keys().copied().collect();
    for w in times.windows(2) {
        assert_eq!(w[1] - w[0], 1000, "{times:?}");
    }
    // Sent ahead: the latest fire was stored before its time.
    assert!(*times.last().unwrap() > now_ms() - 1000, "{times:?}");
    // A pause withdraws the fires sent ahead; the last fire names none of them.
    assert!(queue.pause_schedule("p").await.unwrap());
    let paused_at = now_ms();
    let left = stored_fires(&queue, "p").await;
    assert!(left.keys().all(|f| *f <= paused_at), "{left:?}");
    let info = queue.schedule("p").await.unwrap().unwrap();
    assert!(info.last_fire.is_none_or(|t| ms(t) <= paused_at), "{info:?}");
}

/// A scheduler whose tick (20 s) holds 40 fires of a 1 s schedule: its
/// first tick stores every fire up to the horizon, so no fire is missed
/// and none is late, however few ticks run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interval_shorter_than_the_tick_is_fed_the_whole_horizon() {
    let (_server, _client, queue) = start_queue("fast", Duration::from_secs(20), |b| b).await;
    let schedule = Schedule::every(Duration::from_secs(1), "f")
        .misfire(Misfire::Skip)
        .misfire_grace(GRACE);
    let set_at = now_ms();
    assert!(queue.set_schedule("f", schedule).await.unwrap());
    let scheduler = queue.run_schedules();
    // Redis runs on this host: its clock is this clock. 22 s covers a
    // second tick (20 s on) wherever the first one stopped.
    let until = set_at + 22_000;
    assert!(
        wait_for(Duration::from_secs(90), || async {
            last_fire(&queue, "f").await >= until
        })
        .await,
        "fires stored: {:?}",
        stored_fires(&queue, "f").await
    );
    scheduler.shutdown().await.unwrap();
    let fires = stored_fires(&queue, "f").await;
    let times: Vec<i64> = fires.keys().copied().filter(|f| *f <= until).collect();
    assert!(times[0] <= set_at + 2000, "first fire {}, set at {set_at}", times[0]);
    for w in times.windows(2) {
        assert_eq!(w[1] - w[0], 1000, "a fire missed: {times:?}");
    }
    // The first fires may be late on a busy host; the later ones were sent ahead.
    for (f, due) in fires.range(set_at + 5000..=until) {
        assert_eq!(f, due, "fire {f} late: {fires:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sharded_queue_delivers_each_fire_of_its_schedules_once() {
    let (_server, client, queue) = start_queue("sharded-cron", FETCH, |b| b.shards(3)).await;
    // Names in each of the 3 shards (2, 1, 1, 1, 0, 2 by their hash slots).
    let names = ["daily", "hourly", "ping", "report", "cleanup", "sync"];
    for name in names {
        assert!(queue
            .set_schedule(name, Schedule::every(Duration::from_secs(1), name))
            .await
            .unwrap());
    }
    // The schedules spread over the shards, each in the shard of its fires.
    let mut used = 0;
    for shard in 0..3 {
        let key = format!("dq:{{sharded-cron#{shard}}}:schedules");
        let n: u64 = client.zcard(&key).await.unwrap();
        used += usize::from(n > 0);
    }
    assert_eq!(used, 3, "the schedules did not spread over the 3 shards");
    let seen = Seen::default();
    let mut consumers = Vec::new();
    for _ in 0..2 {
        let q = queue_builder("sharded-cron", &client, FETCH).shards(3).build().unwrap();
        consumers.push(q.start_consume(seen.handler()).await.unwrap());
    }
    let per_schedule = |seen: &Seen| {
        let mut out: BTreeMap<String, Vec<i64>> = BTreeMap::new();
        for (id, _) in seen.0.lock().unwrap().iter() {
            let name = id.trim_start_matches('{').split('}').next().unwrap().to_string();
            out.entry(name).or_default().push(fire_ms(id));
        }
        out
    };
    assert!(
        support::wait_until(WAIT, || {
            let p = per_schedule(&seen);
            p.len() == names.len() && p.values().all(|f| f.len() >= 4)
        })
        .await,
        "{:?}",
        per_schedule(&seen)
    );
    for name in names {
        assert!(queue.pause_schedule(name).await.unwrap());
    }
    assert_eq!(wait_stats(&queue, WAIT, Counts::default()).await, Counts::default());
    for c in consumers {
        c.shutdown().await.unwrap();
    }
    for (name, mut fires) in per_schedule(&seen) {
        let n = fires.len();
        fires.sort();
        fires.dedup();
        assert_eq!(fires.len(), n, "schedule {name}: a fire delivered twice");
        for w in fires.windows(2) {
            assert_eq!(w[1] - w[0], 1000, "schedule {name}: a fire missing: {fires:?}");
        }
        let info = queue.schedule(&name).await.unwrap().unwrap();
        assert_eq!(info.fired, n as u64, "schedule {name}: fires sent vs delivered");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schedule_changes_are_events_and_info_logs() {
    use delayqueue::{Action, Event};
    let logs = support::logs::Logs::capture("changes");
    let (_server, _client, queue) = start_queue("changes", FETCH, |b| b).await;
    let mut events = queue.events();
    let every = || Schedule::every(Duration::from_secs(3600), "x");
    assert!(queue.set_schedule("c", every()).await.unwrap());
    // Changes nothing: no event.
    assert!(!queue.set_schedule("c", every()).await.unwrap());
    assert!(queue.pause_schedule("c").await.unwrap());
    assert!(!queue.pause_schedule("c").await.unwrap());
    assert!(queue.resume_schedule("c").await.unwrap());
    let triggered = queue.trigger_schedule("c").await.unwrap();
    assert!(queue.remove_schedule("c").await.unwrap());
    assert!(!queue.remove_schedule("c").await.unwrap());

    let mut changed = Vec::new();
    let deadline = tokio::time::Instant::now() + WAIT;
    while changed.len() < 5 && tokio::time::Instant::now() < deadline {
        match tokio::time::timeout_at(deadline, events.recv()).await {
            Ok(Ok(Event::Changed {
                action,
                id,
                count,
                schedule,
                ..
            })) => changed.push((action, schedule, id.map(|i| i.as_str().to_string()), count)),
            Ok(Ok(_)) => {}
            other => panic!("events ended: {other:?}"),
        }
    }
    let c = Some("c".to_string());
    assert_eq!(
        changed,
        [
            (Action::ScheduleSet, c.clone(), None, 0),
            (Action::SchedulePaused, c.clone(), None, 0),
            (Action::ScheduleResumed, c.clone(), None, 0),
            (
                Action::ScheduleTriggered,
                c.clone(),
                Some(triggered.as_str().to_string()),
                1
            ),
            (Action::ScheduleRemoved, c, None, 0),
        ]
    );
    let lines: Vec<String> = logs.text().lines().map(str::to_string).collect();
    let info = |what: &str| lines.iter().filter(|l| l.contains("INFO") && l.contains(what)).count();
    assert_eq!(info("schedule set"), 1, "{lines:#?}");
    assert_eq!(info("SchedulePaused"), 1, "{lines:#?}");
    assert_eq!(info("ScheduleResumed"), 1, "{lines:#?}");
    assert_eq!(info("schedule triggered"), 1, "{lines:#?}");
    assert_eq!(info("schedule removed"), 1, "{lines:#?}");
}
