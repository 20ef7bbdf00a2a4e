//! The connection to Redis, one session at a time: connect (a command
//! connection and a subscription), run until Redis fails, fall back to
//! local state and say so, reconnect with a back-off. Commands from the
//! rest of weir arrive on a channel and never wait on Redis: while it is
//! away, locks are local only, purges and stored files queue for the next
//! session, and limits count alone.
//!
//! Its own loop rather than the crate's `ConnectionManager`, which
//! reconnects out of sight: weir must know the moment Redis is away (to
//! stop adding in counts nobody sends, and to tell the operator) and must
//! resubscribe and replay its queue when it returns.
//!
//! Purges go to a stream (`weir:purges`, the last 10,000) as well as to
//! the channel: an instance that was away reads what it missed from the
//! stream when it is back, so none is lost to a subscription that was not
//! there yet.
//!
//! Redis may come back empty (restarted with nothing saved, or flushed):
//! `weir:epoch`, a marker set by the first instance to find it
//! missing, tells. An instance that finds the marker gone or changed writes
//! back what it holds that Redis lacks (its storage files: certificates,
//! keys, the local CA), so an instance started later takes them from Redis
//! instead of making its own. Heartbeats and limit counts come back by
//! themselves; purges made before are not needed (Redis held no cache).
//!
//! An instance that stops cleanly publishes that it leaves
//! (`weir:leave`): the others drop it at once instead of after
//! [`GONE_AFTER`] of silence.
//!
//! Keys and channels (prefix `weir` by default): `weir:members` (a hash of
//! heartbeats), `weir:storage` (a hash of encrypted files), `weir:lock:NAME`,
//! `weir:purges` (a stream), `weir:epoch`, and the channels `weir:limits`,
//! `weir:purge`, `weir:ack`, `weir:challenge`, `weir:leave`.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use redis::aio::MultiplexedConnection;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;
use weir_cache::Invalidation;

use crate::{Cluster, GONE_AFTER, unix_ms};

/// How long a Redis answer may take before Redis counts as away.
const ANSWER_WITHIN: Duration = Duration::from_secs(1);
/// A lock whose holder died expires after this; its holder refreshes it.
const LOCK_TTL: Duration = Duration::from_secs(60);
/// The longest a process waits for another's lock (an ACME order).
const LOCK_WAIT: Duration = Duration::from_secs(300);
/// Purges kept while Redis is away; beyond it the oldest are dropped (and
/// logged): a purge that old is better replaced by a new one.
const MAX_QUEUED: usize = 10_000;

pub(crate) enum Cmd {
    Purge(u64, Invalidation),
    /// A storage file to store in Redis.
    Push(String, Vec<u8>),
    /// Take the lock on this key; the answer is whether it was taken in
    /// Redis (`None`: Redis is away, the local lock alone holds).
    Lock(String, std::sync::mpsc::Sender<Option<Held>>),
    Unlock(Held),
    /// Every stored file, decrypted.
    Pull(std::sync::mpsc::Sender<Vec<(String, Vec<u8>)>>),
    /// An ACME challenge to announce; answered once it is published.
    Challenge(
        weir_tls::storage::Challenge,
        tokio::sync::oneshot::Sender<()>,
    ),
    Leave(std::sync::mpsc::Sender<()>),
    /// A storage directory opened here: what it holds and Redis lacks is
    /// written to Redis.
    Restore(std::path::PathBuf),
}

#[derive(Serialize, Deserialize)]
struct ChallengeMsg {
    from: String,
    challenge: weir_tls::storage::Challenge,
}

/// A lock taken in Redis.
pub(crate) struct Held {
    pub key: String,
    token: String,
    /// Set when its guard drops: the refreshing stops.
    pub released: Arc<AtomicBool>,
}

#[derive(Serialize, Deserialize)]
struct PurgeMsg {
    id: u64,
    from: String,
    what: Invalidation,
    /// Its id in the purge stream (in the published copy).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    sid: Option<String>,
}

/// Purges kept in the stream for instances that were away.
const STREAM_LEN: usize = 10_000;

/// A stream id `ms-seq`, for ordering.
fn stream_id(s: &str) -> Option<(u64, u64)> {
    let (a, b) = s.split_once('-')?;
    Some((a.parse().ok()?, b.parse().ok()?))
}

#[derive(Serialize, Deserialize)]
struct AckMsg {
    id: u64,
    origin: String,
    by: String,
}

pub(crate) async fn run(
    c: Arc<Cluster>,
    client: redis::Client,
    mut cmds: mpsc::UnboundedReceiver<Cmd>,
    first: std::sync::mpsc::Sender<()>,
) {
    let mut first = Some(first);
    let mut queue: Vec<Cmd> = Vec::new();
    let mut backoff = Duration::from_millis(100);
    let mut ever = false;
    // Said once per outage, not once per attempt.
    let mut said = false;
    loop {
        let why = match connect(&c, &client).await {
            Ok((conn, stream)) => {
                if ever {
                    c.counts.reconnects.fetch_add(1, Ordering::Relaxed);
                }
                ever = true;
                said = false;
                c.set_state(true, None);
                tracing::info!(
                    "cluster: connected to Redis at {} as {}; sharing {}",
                    crate::redact(&c.cfg.redis),
                    c.cfg.name,
                    c.status().shared.join(", ")
                );
                backoff = Duration::from_millis(100);
                if let Some(f) = first.take() {
                    let _ = f.send(());
                }
                let mut s = Session {
                    c: &c,
                    conn,
                    heard: HashMap::new(),
                    last_full: Instant::now(),
                };
                let why = s.serve(stream, &mut cmds, &mut queue).await;
                // Whatever the others counted no longer comes in.
                if let Some(x) = weir_traffic::shared::get() {
                    x.forget_all();
                }
                why
            }
            Err(e) => e,
        };
        if !said {
            said = true;
            tracing::error!(
                "cluster: Redis at {} is out of reach ({why}); limits count locally, \
                 certificates are this instance's, purges are queued; trying again",
                crate::redact(&c.cfg.redis)
            );
        }
        c.set_state(false, Some(why));
        if let Some(f) = first.take() {
            let _ = f.send(());
        }
        // Away: commands are answered locally until the next attempt.
        let until = tokio::time::Instant::now() + backoff;
        loop {
            tokio::select! {
                cmd = cmds.recv() => match cmd {
                    Some(cmd) => away(&c, cmd, &mut queue),
                    None => return,
                },
                _ = tokio::time::sleep_until(until) => break,
            }
        }
        backoff = (backoff * 2).min(Duration::from_secs(2));
    }
}

/// A command while Redis is away.
fn away(c: &Cluster, cmd: Cmd, queue: &mut Vec<Cmd>) {
    match cmd {
        Cmd::Lock(key, reply) => {
            tracing::warn!("cluster: Redis is away; {key} is locked on this instance only");
            let _ = reply.send(None);
        }
        Cmd::Pull(reply) => {
            let _ = reply.send(Vec::new());
        }
        Cmd::Leave(done) => {
            let _ = done.send(());
        }
        // The CA's validation reaches this instance, or the order fails
        // and is tried again later.
        Cmd::Challenge(_, done) => {
            let _ = done.send(());
        }
        // Nobody else holds it through us: the key expires in Redis.
        Cmd::Unlock(_) => {}
        Cmd::Purge(..) | Cmd::Push(..) | Cmd::Restore(..) => enqueue(c, cmd, queue),
    }
}

fn enqueue(c: &Cluster, cmd: Cmd, queue: &mut Vec<Cmd>) {
    let purges = queue.iter().filter(|q| matches!(q, Cmd::Purge(..))).count();
    if matches!(cmd, Cmd::Purge(..))
        && purges >= MAX_QUEUED
        && let Some(i) = queue.iter().position(|q| matches!(q, Cmd::Purge(..)))
        && let Cmd::Purge(_, w) = queue.remove(i)
    {
        tracing::warn!(
            "cluster: more than {MAX_QUEUED} purges wait for Redis; the oldest ({w}) is dropped"
        );
    }
    queue.push(cmd);
    let n = queue.iter().filter(|q| matches!(q, Cmd::Purge(..))).count();
    c.counts.purges_queued.store(n as u64, Ordering::Relaxed);
}

type Stream = redis::aio::PubSubStream;

async fn connect(
    c: &Cluster,
    client: &redis::Client,
) -> Result<(MultiplexedConnection, Stream), String> {
    let cfg = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(2)))
        .set_response_timeout(Some(ANSWER_WITHIN));
    let conn = client
        .get_multiplexed_async_connection_with_config(&cfg)
        .await
        .map_err(|e| e.to_string())?;
    let mut ps = tokio::time::timeout(Duration::from_secs(2), client.get_async_pubsub())
        .await
        .map_err(|_| "no answer within 2s".to_string())?
        .map_err(|e| e.to_string())?;
    for ch in ["limits", "purge", "ack", "challenge", "leave"] {
        tokio::time::timeout(ANSWER_WITHIN, ps.subscribe(c.key(ch)))
            .await
            .map_err(|_| "no answer to SUBSCRIBE".to_string())?
            .map_err(|e| e.to_string())?;
    }
    Ok((conn, ps.into_on_message()))
}

struct Session<'a> {
    c: &'a Arc<Cluster>,
    conn: MultiplexedConnection,
    /// When each other instance's heartbeat last changed (our clock, so
    /// machines' clocks need not agree), and the heartbeat seen.
    heard: HashMap<String, (Instant, String)>,
    last_full: Instant,
}

impl Session<'_> {
    /// Runs until Redis fails; says why.
    async fn serve(
        &mut self,
        mut stream: Stream,
        cmds: &mut mpsc::UnboundedReceiver<Cmd>,
        queue: &mut Vec<Cmd>,
    ) -> String {
        // What waited for Redis goes first, in order.
        let waiting = std::mem::take(queue);
        let replayed = waiting
            .iter()
            .filter(|q| matches!(q, Cmd::Purge(..)))
            .count();
        let mut waiting = waiting.into_iter();
        while let Some(cmd) = waiting.next() {
            if let Err(e) = self.command(cmd, queue).await {
                queue.extend(waiting);
                return e;
            }
        }
        self.c.counts.purges_queued.store(0, Ordering::Relaxed);
        if replayed > 0 {
            tracing::info!("cluster: {replayed} queued purges sent to the other instances");
        }
        if let Err(e) = self.catch_up().await {
            return e;
        }
        // What the limits counted while Redis was away was counted alone
        // by each instance: sending it now would refuse for as long again.
        if let Some(x) = weir_traffic::shared::get() {
            let _ = x.collect(false, weir_traffic::clock::now_ms());
        }
        if let Err(e) = self.heartbeat().await {
            return e;
        }
        let mut exchange = tokio::time::interval(self.c.cfg.exchange);
        exchange.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut beat = tokio::time::interval(Duration::from_secs(1));
        beat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let limits = self.c.cfg.share.limits;
        loop {
            let r = tokio::select! {
                _ = exchange.tick(), if limits => self.exchange().await,
                _ = beat.tick() => self.heartbeat().await,
                m = stream.next() => match m {
                    Some(m) => self.message(m).await,
                    None => Err("the subscription ended".to_string()),
                },
                cmd = cmds.recv() => match cmd {
                    Some(cmd) => self.command(cmd, queue).await,
                    None => return "weir is stopping".into(),
                },
            };
            if let Err(e) = r {
                return e;
            }
        }
    }

    async fn query<T: redis::FromRedisValue>(&mut self, cmd: &redis::Cmd) -> Result<T, String> {
        cmd.query_async(&mut self.conn)
            .await
            .map_err(|e| e.to_string())
    }

    async fn publish(&mut self, ch: &str, payload: &[u8]) -> Result<(), String> {
        let ch = self.c.key(ch);
        self.query::<i64>(redis::cmd("PUBLISH").arg(ch).arg(payload))
            .await
            .map(|_| ())
    }

    /// What the limits counted since the last exchange.
    async fn exchange(&mut self) -> Result<(), String> {
        let Some(x) = weir_traffic::shared::get() else {
            return Ok(());
        };
        let full = self.last_full.elapsed() >= Duration::from_secs(1);
        if full {
            self.last_full = Instant::now();
        }
        let Some(msg) = x.collect(full, weir_traffic::clock::now_ms()) else {
            return Ok(());
        };
        let name = self.c.cfg.name.as_bytes();
        let mut frame = Vec::with_capacity(1 + name.len() + msg.len());
        frame.push(name.len().min(255) as u8);
        frame.extend_from_slice(&name[..name.len().min(255)]);
        frame.extend_from_slice(&msg);
        self.c.counts.exchanges_sent.fetch_add(1, Ordering::Relaxed);
        self.publish("limits", &frame).await
    }

    /// Whether Redis still holds what it held when this instance last
    /// looked (its `epoch` marker is the same); if not, writes back what
    /// this instance holds. The first connection only learns the marker
    /// (setting it when Redis has none): what this instance holds then is
    /// written back when its storage is opened ([`Cmd::Restore`]).
    async fn check_epoch(&mut self) -> Result<(), String> {
        let key = self.c.key("epoch");
        let mut now: Option<String> = self.query(redis::cmd("GET").arg(&key)).await?;
        if now.is_none() {
            // Unique to this instance and moment: no two markers alike.
            let mine = format!("{}:{}:{}", self.c.cfg.name, std::process::id(), unix_ms());
            let _: Option<String> = self
                .query(redis::cmd("SET").arg(&key).arg(&mine).arg("NX"))
                .await?;
            now = self.query(redis::cmd("GET").arg(&key)).await?;
        }
        let known = crate::lock(&self.c.epoch).clone();
        if now == known {
            return Ok(());
        }
        if known.is_some() {
            tracing::warn!(
                "cluster: Redis no longer holds what it held (restarted with nothing saved, or flushed); \
                 writing back what this instance holds"
            );
            let roots = crate::lock(&self.c.roots).clone();
            for root in roots {
                self.restore(&root).await?;
            }
        }
        *crate::lock(&self.c.epoch) = now;
        Ok(())
    }

    /// Writes the files of the storage directory `root` that Redis lacks
    /// (`HSETNX`: a file another instance wrote back or stored first is
    /// left alone).
    async fn restore(&mut self, root: &std::path::Path) -> Result<(), String> {
        let r = root.to_path_buf();
        let files = tokio::task::spawn_blocking(move || held_files(&r))
            .await
            .unwrap_or_default();
        let key = self.c.key("storage");
        let mut written = 0;
        for chunk in files.chunks(500) {
            let mut pipe = redis::pipe();
            for (rel, data) in chunk {
                match self.c.seal.seal(rel, data) {
                    Ok(sealed) => {
                        pipe.cmd("HSETNX").arg(&key).arg(rel).arg(sealed);
                    }
                    Err(e) => tracing::error!("cluster: {rel} not stored in Redis: {e}"),
                }
            }
            let set: Vec<i64> = pipe
                .query_async(&mut self.conn)
                .await
                .map_err(|e| e.to_string())?;
            written += set.iter().filter(|n| **n == 1).count();
        }
        if written > 0 {
            tracing::info!(
                "cluster: {written} files of {} that Redis lacked written back (certificates, keys, the local CA)",
                root.display()
            );
        }
        Ok(())
    }

    /// Says this instance is here, and reads who else is.
    async fn heartbeat(&mut self) -> Result<(), String> {
        self.check_epoch().await?;
        let members = self.c.key("members");
        let me = serde_json::json!({ "seen": unix_ms(), "pid": std::process::id() }).to_string();
        self.query::<i64>(
            redis::cmd("HSET")
                .arg(&members)
                .arg(&self.c.cfg.name)
                .arg(me),
        )
        .await?;
        let all: HashMap<String, String> = self.query(redis::cmd("HGETALL").arg(&members)).await?;
        let now = Instant::now();
        let mut stale = Vec::new();
        for (name, beat) in all {
            if name == self.c.cfg.name {
                continue;
            }
            match self.heard.get_mut(&name) {
                Some((at, b)) if *b == beat => {
                    // Long silent: an instance that went away without leaving.
                    if at.elapsed() > Duration::from_secs(3600) {
                        stale.push(name);
                    }
                }
                Some(h) => *h = (now, beat),
                None => {
                    tracing::info!("cluster: instance {name} is here");
                    self.heard.insert(name, (now, beat));
                }
            }
        }
        for name in stale {
            self.heard.remove(&name);
            self.query::<i64>(redis::cmd("HDEL").arg(&members).arg(&name))
                .await?;
        }
        let x = weir_traffic::shared::get();
        for (name, (at, _)) in &self.heard {
            let ago = at.elapsed();
            if ago >= GONE_AFTER {
                if ago < GONE_AFTER + Duration::from_secs(1) {
                    tracing::warn!(
                        "cluster: instance {name} silent for {}s; its counts no longer add in",
                        ago.as_secs()
                    );
                }
                if let Some(x) = x {
                    x.forget(name);
                }
            }
        }
        self.show_members();
        Ok(())
    }

    /// The others as the admin API shows them, with when each was heard of.
    fn show_members(&self) {
        let ms = unix_ms();
        let mut shown: Vec<(String, u64)> = self
            .heard
            .iter()
            .map(|(name, (at, _))| {
                (
                    name.clone(),
                    ms.saturating_sub(at.elapsed().as_millis() as u64),
                )
            })
            .collect();
        shown.sort();
        self.c.set_members(shown);
    }

    async fn message(&mut self, m: redis::Msg) -> Result<(), String> {
        let ch = m.get_channel_name();
        let body = m.get_payload_bytes();
        let me = &self.c.cfg.name;
        if ch.ends_with(":limits") {
            let Some((&n, rest)) = body.split_first() else {
                return Ok(());
            };
            if rest.len() < n as usize {
                return Ok(());
            }
            let (from, msg) = rest.split_at(n as usize);
            let from = String::from_utf8_lossy(from);
            if from == *me {
                return Ok(());
            }
            self.c
                .counts
                .exchanges_received
                .fetch_add(1, Ordering::Relaxed);
            if let Some(h) = self.heard.get_mut(&*from) {
                h.0 = Instant::now();
            }
            if let Some(x) = weir_traffic::shared::get()
                && let Err(e) = x.apply(&from, msg, weir_traffic::clock::now_ms())
            {
                tracing::warn!("cluster: limit counts from {from}: {e}");
            }
        } else if ch.ends_with(":purge") {
            let Ok(p) = serde_json::from_slice::<PurgeMsg>(body) else {
                tracing::warn!("cluster: an unreadable purge message on {ch}");
                return Ok(());
            };
            self.take_purge(p).await?;
        } else if ch.ends_with(":challenge") {
            if let Ok(m) = serde_json::from_slice::<ChallengeMsg>(body)
                && m.from != *me
            {
                tracing::debug!("cluster: ACME challenge from {}: {:?}", m.from, m.challenge);
                weir_tls::acme::answer_remote(&m.challenge);
            }
        } else if ch.ends_with(":leave") {
            let from = String::from_utf8_lossy(body);
            if from != *me && self.heard.remove(&*from).is_some() {
                tracing::info!("cluster: instance {from} left");
                if let Some(x) = weir_traffic::shared::get() {
                    x.forget(&from);
                }
                self.show_members();
            }
        } else if ch.ends_with(":ack")
            && let Ok(a) = serde_json::from_slice::<AckMsg>(body)
            && a.origin == *me
        {
            self.c.ack(a.id, &a.by);
        }
        Ok(())
    }

    /// A purge from the stream or the channel, applied once (the later of
    /// the two copies is skipped) and acknowledged.
    async fn take_purge(&mut self, p: PurgeMsg) -> Result<(), String> {
        let sid = p.sid.as_deref().and_then(stream_id);
        {
            let mut last = crate::lock(&self.c.last_purge);
            if let (Some(s), Some(l)) = (sid, *last)
                && s <= l
            {
                return Ok(());
            }
            if sid.is_some() {
                *last = sid;
            }
        }
        if p.from == self.c.cfg.name {
            return Ok(());
        }
        self.c.apply_purge(&p.from, &p.what);
        let ack = serde_json::to_vec(&AckMsg {
            id: p.id,
            origin: p.from,
            by: self.c.cfg.name.clone(),
        })
        .unwrap_or_default();
        self.publish("ack", &ack).await
    }

    /// The purges made while this instance was away; on its first
    /// connection, only where the stream ends now.
    async fn catch_up(&mut self) -> Result<(), String> {
        let key = self.c.key("purges");
        type Entries = Vec<(String, HashMap<String, Vec<u8>>)>;
        let last = *crate::lock(&self.c.last_purge);
        let Some((ms, seq)) = last else {
            let tail: Entries = self
                .query(
                    redis::cmd("XREVRANGE")
                        .arg(&key)
                        .arg("+")
                        .arg("-")
                        .arg("COUNT")
                        .arg(1),
                )
                .await?;
            *crate::lock(&self.c.last_purge) = Some(
                tail.first()
                    .and_then(|(id, _)| stream_id(id))
                    .unwrap_or((0, 0)),
            );
            return Ok(());
        };
        let missed: Entries = self
            .query(
                redis::cmd("XRANGE")
                    .arg(&key)
                    .arg(format!("({ms}-{seq}"))
                    .arg("+")
                    .arg("COUNT")
                    .arg(STREAM_LEN),
            )
            .await?;
        let n = missed.len();
        for (id, fields) in missed {
            let Some(m) = fields.get("m") else { continue };
            if let Ok(mut p) = serde_json::from_slice::<PurgeMsg>(m) {
                p.sid = Some(id);
                self.take_purge(p).await?;
            }
        }
        if n > 0 {
            tracing::info!("cluster: {n} purges made while this instance was away read from Redis");
        }
        Ok(())
    }

    async fn command(&mut self, cmd: Cmd, queue: &mut Vec<Cmd>) -> Result<(), String> {
        match cmd {
            Cmd::Purge(id, what) => {
                let mut p = PurgeMsg {
                    id,
                    from: self.c.cfg.name.clone(),
                    what: what.clone(),
                    sid: None,
                };
                let stored = serde_json::to_vec(&p).unwrap_or_default();
                let sent = async {
                    let sid: String = self
                        .query(
                            redis::cmd("XADD")
                                .arg(self.c.key("purges"))
                                .arg("MAXLEN")
                                .arg("~")
                                .arg(STREAM_LEN)
                                .arg("*")
                                .arg("m")
                                .arg(&stored),
                        )
                        .await?;
                    p.sid = Some(sid);
                    self.publish("purge", &serde_json::to_vec(&p).unwrap_or_default())
                        .await
                }
                .await;
                if let Err(e) = sent {
                    enqueue(self.c, Cmd::Purge(id, what), queue);
                    return Err(e);
                }
                self.c.counts.purges_sent.fetch_add(1, Ordering::Relaxed);
            }
            Cmd::Push(rel, data) => {
                let sealed = match self.c.seal.seal(&rel, &data) {
                    Ok(s) => s,
                    Err(e) => {
                        tracing::error!("cluster: {rel} not stored in Redis: {e}");
                        return Ok(());
                    }
                };
                let key = self.c.key("storage");
                if let Err(e) = self
                    .query::<i64>(redis::cmd("HSET").arg(key).arg(&rel).arg(sealed))
                    .await
                {
                    enqueue(self.c, Cmd::Push(rel, data), queue);
                    return Err(e);
                }
                tracing::debug!("cluster: {rel} stored in Redis");
            }
            Cmd::Lock(name, reply) => {
                // Waiting for another holder must not stop the session:
                // the lock is taken on a task of its own.
                let conn = self.conn.clone();
                let key = self.c.key(&format!("lock:{name}"));
                let token = format!("{}:{}", self.c.cfg.name, unix_ms());
                tokio::spawn(take_lock(conn, key, token, reply));
            }
            Cmd::Unlock(h) => {
                let script = redis::Script::new(
                    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) else return 0 end",
                );
                let mut inv = script.key(&h.key);
                inv.arg(&h.token);
                inv.invoke_async::<i64>(&mut self.conn)
                    .await
                    .map_err(|e| e.to_string())?;
            }
            Cmd::Pull(reply) => {
                let key = self.c.key("storage");
                let all: HashMap<String, Vec<u8>> =
                    self.query(redis::cmd("HGETALL").arg(key)).await?;
                let mut files = Vec::with_capacity(all.len());
                for (rel, blob) in all {
                    match self.c.seal.open(&rel, &blob) {
                        Ok(d) => files.push((rel, d)),
                        Err(e) => tracing::error!("cluster: {rel} in Redis: {e}"),
                    }
                }
                let _ = reply.send(files);
            }
            Cmd::Challenge(c, done) => {
                let msg = serde_json::to_vec(&ChallengeMsg {
                    from: self.c.cfg.name.clone(),
                    challenge: c,
                })
                .unwrap_or_default();
                let r = self.publish("challenge", &msg).await;
                let _ = done.send(());
                r?;
            }
            Cmd::Leave(done) => {
                // Out of the hash first: an instance that reads it after
                // the message does not count this one in again.
                let members = self.c.key("members");
                let _ = self
                    .query::<i64>(redis::cmd("HDEL").arg(members).arg(&self.c.cfg.name))
                    .await;
                let name = self.c.cfg.name.clone();
                let _ = self.publish("leave", name.as_bytes()).await;
                let _ = done.send(());
            }
            Cmd::Restore(root) => {
                if let Err(e) = self.restore(&root).await {
                    enqueue(self.c, Cmd::Restore(root), queue);
                    return Err(e);
                }
            }
        }
        Ok(())
    }
}

/// The files of the storage directory `root` worth sharing, by their path
/// in it: everything but the lock files and temporary files.
fn held_files(root: &std::path::Path) -> Vec<(String, Vec<u8>)> {
    fn walk(root: &std::path::Path, dir: &std::path::Path, out: &mut Vec<(String, Vec<u8>)>) {
        let Ok(rd) = std::fs::read_dir(dir) else {
            return;
        };
        for e in rd.flatten() {
            let path = e.path();
            let Ok(rel) = path.strip_prefix(root) else {
                continue;
            };
            let Some(rel) = rel.to_str().map(str::to_string) else {
                continue;
            };
            if rel == "locks" || e.file_name().to_string_lossy().starts_with('.') {
                continue;
            }
            match e.file_type() {
                Ok(t) if t.is_dir() => walk(root, &path, out),
                Ok(t) if t.is_file() => {
                    if let Ok(data) = std::fs::read(&path) {
                        out.push((rel, data));
                    }
                }
                _ => {}
            }
        }
    }
    let mut out = Vec::new();
    walk(root, root, &mut out);
    out
}

/// Takes `key` in Redis (waiting while another holds it) and keeps it
/// from expiring until it is released.
async fn take_lock(
    mut conn: MultiplexedConnection,
    key: String,
    token: String,
    reply: std::sync::mpsc::Sender<Option<Held>>,
) {
    let deadline = Instant::now() + LOCK_WAIT;
    let mut said = false;
    loop {
        let r: Result<Option<String>, _> = redis::cmd("SET")
            .arg(&key)
            .arg(&token)
            .arg("NX")
            .arg("PX")
            .arg(LOCK_TTL.as_millis() as u64)
            .query_async(&mut conn)
            .await;
        match r {
            Ok(Some(_)) => break,
            Ok(None) if Instant::now() < deadline => {
                if !said {
                    tracing::info!("cluster: {key} is held by another instance; waiting");
                    said = true;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Ok(None) => {
                tracing::warn!(
                    "cluster: {key} still held after {LOCK_WAIT:?}; going on with the local lock"
                );
                let _ = reply.send(None);
                return;
            }
            Err(e) => {
                tracing::warn!("cluster: {key}: {e}; going on with the local lock");
                let _ = reply.send(None);
                return;
            }
        }
    }
    let released = Arc::new(AtomicBool::new(false));
    let held = Held {
        key: key.clone(),
        token: token.clone(),
        released: released.clone(),
    };
    if reply.send(Some(held)).is_err() {
        return;
    }
    // Refresh while held, so a long order does not lose it.
    while !released.load(Ordering::Relaxed) {
        tokio::time::sleep(LOCK_TTL / 4).await;
        if released.load(Ordering::Relaxed) {
            break;
        }
        // Only while it is still ours.
        let script = redis::Script::new(
            "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) else return 0 end",
        );
        let mut inv = script.key(&key);
        inv.arg(&token).arg(LOCK_TTL.as_millis() as u64);
        let _: Result<i64, _> = inv.invoke_async(&mut conn).await;
    }
}
