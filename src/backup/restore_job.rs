//! `valkey-operator restore run`: what a restore Job's pod does. It reads its plan from
//! `RESTORE_PLAN`, the backup's manifest from the bucket, then streams each shard's snapshot
//! ([`super::dump`] turns it into RESTORE payloads without decoding a value) and replays every
//! key into the primary owning its slot, pipelined, as the `_valkey-restore` user. The
//! snapshot's checksum is compared with the manifest's at its end. Its outcome goes to the
//! termination message, as a backup Job's does.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use object_store::{ObjectStore, ObjectStoreExt};
use sha2::Digest;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};

use super::dump::{Entry, RdbKeys};
use super::job::{ENV_OUTCOME_FILE, ENV_VALKEY_PASSWORD, ENV_VALKEY_USER, env, object_path};
use super::restore::{RestoreOutcome, RestorePlan, RestoreSummary, ShardRestored};
use super::{Failure, FailureCause, Manifest, ShardCopy};

pub const ENV_RESTORE_PLAN: &str = "RESTORE_PLAN";

/// Commands (or bytes) sent to a primary before its replies are read.
const PIPELINE_COMMANDS: usize = 512;
const PIPELINE_BYTES: usize = 4 * 1024 * 1024;
/// The longest a primary may take over one batch.
const REPLY_TIMEOUT: Duration = Duration::from_secs(60);

/// Runs the plan, writes the outcome, and says whether it succeeded.
pub async fn run() -> bool {
    let outcome = match run_plan().await {
        Ok(summary) => RestoreOutcome::Completed(summary),
        Err(failure) => RestoreOutcome::Failed(failure),
    };
    let text = outcome.termination_message();
    eprintln!("{text}");
    let file =
        std::env::var(ENV_OUTCOME_FILE).unwrap_or_else(|_| super::job::DEFAULT_OUTCOME_FILE.into());
    if let Err(e) = std::fs::write(&file, &text) {
        eprintln!("could not write the outcome to {file}: {e}");
    }
    matches!(outcome, RestoreOutcome::Completed(_))
}

async fn run_plan() -> Result<RestoreSummary, Failure> {
    let plan: RestorePlan = serde_json::from_str(&env(ENV_RESTORE_PLAN)?).map_err(|e| {
        Failure::new(
            FailureCause::Plan,
            format!("{ENV_RESTORE_PLAN} is not a plan: {e}"),
        )
    })?;
    let store = super::job::object_store(&plan.location)?;
    let started_at = crate::time::rfc3339(crate::time::now_seconds());
    let manifest = read_manifest(&store, &plan).await?;
    let user = env(ENV_VALKEY_USER)?;
    let password = env(ENV_VALKEY_PASSWORD)?;
    let mut targets = Vec::with_capacity(plan.targets.len());
    for target in &plan.targets {
        targets.push(Target::connect(&plan, target, &user, &password).await?);
    }
    let mut summary = RestoreSummary {
        started_at,
        ..Default::default()
    };
    for shard in &manifest.shards {
        let (restored, functions) = replay_shard(&store, &plan, shard, &mut targets).await?;
        eprintln!(
            "shard {}: {} keys restored, {} expired, {} bytes",
            restored.index, restored.keys, restored.expired, restored.bytes
        );
        summary.shards.push(restored);
        summary.functions = summary.functions.max(functions);
    }
    summary.completed_at = crate::time::rfc3339(crate::time::now_seconds());
    Ok(summary)
}

async fn read_manifest(
    store: &Arc<dyn ObjectStore>,
    plan: &RestorePlan,
) -> Result<Manifest, Failure> {
    let bucket = &plan.location.bucket;
    let path = object_path(&plan.path, super::MANIFEST_OBJECT);
    let body = store
        .get(&path)
        .await
        .map_err(|e| Failure::from_store("reading the manifest", bucket, &e))?
        .bytes()
        .await
        .map_err(|e| Failure::from_store("reading the manifest", bucket, &e))?;
    let manifest: Manifest = serde_json::from_slice(&body).map_err(|e| {
        Failure::new(
            FailureCause::Plan,
            format!("s3://{bucket}/{path} is not a backup manifest: {e}"),
        )
    })?;
    Ok(manifest)
}

/// Streams one shard's snapshot and replays its keys; the figures and the function
/// libraries loaded.
async fn replay_shard(
    store: &Arc<dyn ObjectStore>,
    plan: &RestorePlan,
    shard: &ShardCopy,
    targets: &mut [Target],
) -> Result<(ShardRestored, u32), Failure> {
    let bucket = &plan.location.bucket;
    let path = object_path(&plan.path, &shard.object);
    let doing = format!("reading shard {} ({path})", shard.index);
    let mut body = store
        .get(&path)
        .await
        .map_err(|e| Failure::from_store(&doing, bucket, &e))?
        .into_stream();
    let mut keys = RdbKeys::new();
    let mut hash = sha2::Sha256::new();
    let mut restored = ShardRestored {
        index: shard.index,
        ..Default::default()
    };
    let mut functions = 0;
    let now_ms = crate::time::now_millis();
    while let Some(chunk) = body.next().await {
        let chunk = chunk.map_err(|e| Failure::from_store(&doing, bucket, &e))?;
        hash.update(&chunk);
        restored.bytes += chunk.len() as u64;
        keys.push(&chunk);
        while let Some(entry) = keys.next().map_err(|e| corrupt(shard, &e))? {
            replay_entry(
                plan,
                entry,
                targets,
                (&mut restored, &mut functions),
                now_ms,
            )
            .await?;
        }
    }
    keys.finish().map_err(|e| corrupt(shard, &e))?;
    for target in targets.iter_mut() {
        target.flush().await?;
    }
    let sha256 = hex::encode(hash.finalize());
    if sha256 != shard.sha256 {
        return Err(Failure::new(
            FailureCause::ObjectStore,
            format!(
                "shard {}'s snapshot {path} does not match the manifest's checksum ({sha256} != {}): the object changed after the backup",
                shard.index, shard.sha256
            ),
        ));
    }
    Ok((restored, functions))
}

/// One entry of a snapshot into the cluster: a key to the primary owning its slot (unless its
/// time to live has passed), a function library to every primary.
async fn replay_entry(
    plan: &RestorePlan,
    entry: Entry,
    targets: &mut [Target],
    (restored, functions): (&mut ShardRestored, &mut u32),
    now_ms: i64,
) -> Result<(), Failure> {
    match entry {
        Entry::Key(key) if key.expire_at_ms.is_some_and(|at| at <= now_ms) => {
            restored.expired += 1;
        }
        Entry::Key(key) => {
            let slot = fred::util::redis_keyslot(&key.key);
            let owner = plan.owner_of(slot).ok_or_else(|| {
                Failure::new(
                    FailureCause::Plan,
                    format!("no primary of the cluster owns slot {slot}"),
                )
            })?;
            let ttl = key.expire_at_ms.unwrap_or(0).to_string();
            let words: [&[u8]; 6] = [
                b"RESTORE",
                &key.key,
                ttl.as_bytes(),
                &key.payload,
                b"REPLACE",
                b"ABSTTL",
            ];
            targets[owner].send(&words).await?;
            restored.keys += 1;
        }
        Entry::Function(code) => {
            for target in targets.iter_mut() {
                target
                    .send(&[b"FUNCTION", b"LOAD", b"REPLACE", &code])
                    .await?;
            }
            *functions += 1;
        }
        Entry::End => {}
    }
    Ok(())
}

fn corrupt(shard: &ShardCopy, error: &dyn std::fmt::Display) -> Failure {
    Failure::new(
        FailureCause::ObjectStore,
        format!(
            "shard {}'s snapshot {} is not a readable RDB: {error}",
            shard.index, shard.object
        ),
    )
}

trait Stream: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Stream for T {}

/// One primary: a connection logged in as the restore user, commands buffered and sent in
/// batches, every reply checked.
struct Target {
    member: String,
    conn: BufReader<Box<dyn Stream>>,
    pending: Vec<u8>,
    commands: usize,
}

impl Target {
    async fn connect(
        plan: &RestorePlan,
        target: &super::restore::RestoreTarget,
        user: &str,
        password: &str,
    ) -> Result<Target, Failure> {
        let failed = |what: String| {
            Failure::new(
                FailureCause::Member,
                format!("primary {} at {}: {what}", target.member, target.address),
            )
        };
        let tcp = tokio::time::timeout(
            Duration::from_secs(10),
            tokio::net::TcpStream::connect(&target.address),
        )
        .await
        .map_err(|_| failed("connecting timed out after 10s".into()))?
        .map_err(|e| failed(format!("connecting: {e}")))?;
        let conn: Box<dyn Stream> = match &plan.tls {
            None => Box::new(tcp),
            Some(tls) => Box::new(super::job::handshake(tls, tcp).await.map_err(failed)?),
        };
        let mut target = Target {
            member: target.member.clone(),
            conn: BufReader::new(conn),
            pending: Vec::new(),
            commands: 0,
        };
        target
            .send(&[b"AUTH", user.as_bytes(), password.as_bytes()])
            .await?;
        target.flush().await?;
        Ok(target)
    }

    /// Buffers one command; sends the batch once it is big enough.
    async fn send(&mut self, words: &[&[u8]]) -> Result<(), Failure> {
        encode(&mut self.pending, words);
        self.commands += 1;
        if self.commands >= PIPELINE_COMMANDS || self.pending.len() >= PIPELINE_BYTES {
            self.flush().await?;
        }
        Ok(())
    }

    /// Sends what is buffered and reads every reply: the first error fails the restore, as
    /// does a primary that takes more than a minute over one batch.
    async fn flush(&mut self) -> Result<(), Failure> {
        let member = self.member.clone();
        tokio::time::timeout(REPLY_TIMEOUT, self.flush_now())
            .await
            .unwrap_or_else(|_| {
                Err(Failure::new(
                    FailureCause::Member,
                    format!("primary {member}: no reply within {REPLY_TIMEOUT:?}"),
                ))
            })
    }

    async fn flush_now(&mut self) -> Result<(), Failure> {
        if self.commands == 0 {
            return Ok(());
        }
        let failed = |what: String| {
            Failure::new(
                FailureCause::Member,
                format!("primary {}: {what}", self.member),
            )
        };
        let io = |e: std::io::Error| format!("connection: {e}");
        let writer = self.conn.get_mut();
        writer
            .write_all(&self.pending)
            .await
            .map_err(|e| failed(io(e)))?;
        writer.flush().await.map_err(|e| failed(io(e)))?;
        let mut first_error = None;
        for _ in 0..self.commands {
            if let Err(error) = read_reply(&mut self.conn)
                .await
                .map_err(|e| failed(io(e)))?
            {
                first_error.get_or_insert(error);
            }
        }
        self.pending.clear();
        self.commands = 0;
        match first_error {
            None => Ok(()),
            Some(error) => Err(failed(format!("Valkey refused: {error}"))),
        }
    }
}

/// A RESP array of bulk strings.
fn encode(out: &mut Vec<u8>, words: &[&[u8]]) {
    out.extend_from_slice(format!("*{}\r\n", words.len()).as_bytes());
    for word in words {
        out.extend_from_slice(format!("${}\r\n", word.len()).as_bytes());
        out.extend_from_slice(word);
        out.extend_from_slice(b"\r\n");
    }
}

/// Reads one reply: `Ok(Err(text))` for an error reply. Only the shapes RESTORE, AUTH and
/// FUNCTION LOAD answer with (status, error, integer, bulk string).
async fn read_reply<R: AsyncRead + Unpin>(
    conn: &mut BufReader<R>,
) -> std::io::Result<Result<(), String>> {
    let mut line = String::new();
    if conn.read_line(&mut line).await? == 0 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "closed by the primary",
        ));
    }
    let line = line.trim_end();
    match line.as_bytes().first() {
        Some(b'-') => Ok(Err(line[1..].to_string())),
        Some(b'$') => {
            let len: i64 = line[1..].parse().unwrap_or(-1);
            if let Ok(len) = usize::try_from(len) {
                let mut skip = vec![0; len + 2];
                conn.read_exact(&mut skip).await?;
            }
            Ok(Ok(()))
        }
        Some(b'+' | b':') => Ok(Ok(())),
        _ => Err(std::io::Error::other(format!("unexpected reply {line:?}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_are_resp_arrays_of_bulk_strings() {
        let mut out = Vec::new();
        encode(&mut out, &[b"RESTORE", b"k", b"0", b"\x00\r\n", b"REPLACE"]);
        assert_eq!(
            out,
            b"*5\r\n$7\r\nRESTORE\r\n$1\r\nk\r\n$1\r\n0\r\n$3\r\n\x00\r\n\r\n$7\r\nREPLACE\r\n"
        );
    }

    #[tokio::test]
    async fn replies_are_read_one_by_one_and_errors_kept() {
        let replies: &[u8] =
            b"+OK\r\n-BUSYKEY Target key name already exists.\r\n$3\r\nlib\r\n:1\r\n";
        let mut conn = BufReader::new(replies);
        assert_eq!(read_reply(&mut conn).await.unwrap(), Ok(()));
        assert_eq!(
            read_reply(&mut conn).await.unwrap(),
            Err("BUSYKEY Target key name already exists.".into())
        );
        assert_eq!(read_reply(&mut conn).await.unwrap(), Ok(()));
        assert_eq!(read_reply(&mut conn).await.unwrap(), Ok(()));
        assert!(read_reply(&mut conn).await.is_err(), "end of stream");
    }
}
