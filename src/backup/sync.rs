//! Taking a shard's RDB the way a replica does: `AUTH`, `REPLCONF rdb-only 1` (the member
//! sends the snapshot and closes, no replication stream after it), `SYNC`, then the payload,
//! copied chunk by chunk into a writer (the object store upload) while it is hashed. Nothing
//! is held whole in memory: one read buffer and, in the diskless form, the 40-byte end mark.
//! What `valkey-cli --rdb` does, minus the file.

use std::time::Duration;

use sha2::{Digest, Sha256};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};

use super::rdb::{RdbError, RdbHeader, parse_header};

/// Longest silence accepted from the member: it sends a newline every second while it
/// writes the snapshot, so a minute of nothing is a dead peer.
const IDLE: Duration = Duration::from_secs(60);
/// The header is complete long before this much of the stream (aux fields and functions).
const HEADER_LIMIT: usize = 1 << 20;
/// The end mark of the diskless form: `$EOF:<40 random characters>`.
const EOF_MARK_LEN: usize = 40;

/// What one shard's copy came to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fetched {
    pub bytes: u64,
    pub sha256: String,
    pub header: RdbHeader,
}

#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    #[error("connection to the member failed: {0}")]
    Io(#[from] std::io::Error),
    #[error("the member refused {command}: {reply}")]
    Refused {
        command: &'static str,
        reply: String,
    },
    #[error("the member sent no data for {}s", IDLE.as_secs())]
    Idle,
    #[error("the member closed the connection after {got} of {expected} bytes")]
    Truncated { got: u64, expected: u64 },
    #[error("the member closed the connection before the end of the snapshot ({0} bytes)")]
    Unterminated(u64),
    #[error(transparent)]
    Rdb(#[from] RdbError),
    #[error("writing the snapshot out failed: {0}")]
    Write(std::io::Error),
}

/// Authenticates as `user` on `conn`, asks for the snapshot and copies it into `out`.
pub async fn fetch_rdb<C, W>(
    conn: C,
    user: &str,
    password: &str,
    out: &mut W,
) -> Result<Fetched, SyncError>
where
    C: AsyncRead + AsyncWrite + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut conn = BufReader::new(conn);
    command(&mut conn, "AUTH", &["AUTH", user, password]).await?;
    command(&mut conn, "REPLCONF", &["REPLCONF", "rdb-only", "1"]).await?;
    send(&mut conn, &["SYNC"]).await?;
    let size = payload_size(&mut conn).await?;
    copy_payload(&mut conn, size, out).await
}

async fn send<C: AsyncWrite + Unpin>(conn: &mut C, args: &[&str]) -> std::io::Result<()> {
    let mut frame = format!("*{}\r\n", args.len()).into_bytes();
    for arg in args {
        frame.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        frame.extend_from_slice(arg.as_bytes());
        frame.extend_from_slice(b"\r\n");
    }
    conn.write_all(&frame).await?;
    conn.flush().await
}

async fn line<C: AsyncBufReadExt + Unpin>(conn: &mut C) -> Result<String, SyncError> {
    let mut line = String::new();
    let n = tokio::time::timeout(IDLE, conn.read_line(&mut line))
        .await
        .map_err(|_| SyncError::Idle)??;
    if n == 0 {
        return Err(SyncError::Unterminated(0));
    }
    Ok(line.trim_end_matches(['\r', '\n']).to_string())
}

async fn command<C>(conn: &mut C, name: &'static str, args: &[&str]) -> Result<(), SyncError>
where
    C: AsyncBufReadExt + AsyncWrite + Unpin,
{
    send(conn, args).await?;
    let reply = line(conn).await?;
    if reply.starts_with('+') {
        Ok(())
    } else {
        Err(SyncError::Refused {
            command: name,
            reply,
        })
    }
}

/// How the payload is delimited.
#[derive(Debug, PartialEq, Eq)]
enum Size {
    Bytes(u64),
    /// Diskless: the payload ends with this mark.
    UntilMark(Vec<u8>),
}

/// Skips the keepalive newlines sent while the member writes its snapshot.
async fn payload_size<C: AsyncBufReadExt + Unpin>(conn: &mut C) -> Result<Size, SyncError> {
    loop {
        let reply = line(conn).await?;
        if reply.is_empty() {
            continue;
        }
        return parse_size(&reply);
    }
}

fn parse_size(reply: &str) -> Result<Size, SyncError> {
    let refused = || SyncError::Refused {
        command: "SYNC",
        reply: reply.to_string(),
    };
    let rest = reply.strip_prefix('$').ok_or_else(refused)?;
    match rest.strip_prefix("EOF:") {
        Some(mark) if mark.len() == EOF_MARK_LEN => Ok(Size::UntilMark(mark.as_bytes().to_vec())),
        Some(_) => Err(refused()),
        None => rest.parse().map(Size::Bytes).map_err(|_| refused()),
    }
}

async fn copy_payload<C, W>(conn: &mut C, size: Size, out: &mut W) -> Result<Fetched, SyncError>
where
    C: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut copy = Copy::default();
    let mut buf = vec![0u8; 256 * 1024];
    match size {
        Size::Bytes(expected) => {
            while copy.bytes < expected {
                let want = usize::try_from(expected - copy.bytes)
                    .map_or(buf.len(), |left| left.min(buf.len()));
                let n = read(conn, &mut buf[..want]).await?;
                if n == 0 {
                    return Err(SyncError::Truncated {
                        got: copy.bytes,
                        expected,
                    });
                }
                copy.write(&buf[..n], out).await?;
            }
        }
        Size::UntilMark(mark) => {
            // The last EOF_MARK_LEN bytes read are held back: they may be the mark.
            let mut held: Vec<u8> = Vec::with_capacity(EOF_MARK_LEN + buf.len());
            loop {
                let n = read(conn, &mut buf).await?;
                if n == 0 {
                    return Err(SyncError::Unterminated(copy.bytes + held.len() as u64));
                }
                held.extend_from_slice(&buf[..n]);
                if held.ends_with(&mark) {
                    held.truncate(held.len() - EOF_MARK_LEN);
                    copy.write(&held, out).await?;
                    break;
                }
                let release = held.len().saturating_sub(EOF_MARK_LEN);
                copy.write(&held[..release], out).await?;
                held.drain(..release);
            }
        }
    }
    out.flush().await.map_err(SyncError::Write)?;
    copy.finish()
}

async fn read<C: AsyncRead + Unpin>(conn: &mut C, buf: &mut [u8]) -> Result<usize, SyncError> {
    Ok(tokio::time::timeout(IDLE, conn.read(buf))
        .await
        .map_err(|_| SyncError::Idle)??)
}

/// The running count, hash and header of the bytes copied so far.
#[derive(Default)]
struct Copy {
    bytes: u64,
    hash: Sha256,
    start: Vec<u8>,
    header: Option<RdbHeader>,
}

impl Copy {
    async fn write<W: AsyncWrite + Unpin>(
        &mut self,
        chunk: &[u8],
        out: &mut W,
    ) -> Result<(), SyncError> {
        if chunk.is_empty() {
            return Ok(());
        }
        if self.header.is_none() {
            self.start.extend_from_slice(chunk);
            self.header = parse_header(&self.start)?;
            if self.header.is_some() || self.start.len() > HEADER_LIMIT {
                self.start = Vec::new();
            }
        }
        self.hash.update(chunk);
        self.bytes += chunk.len() as u64;
        out.write_all(chunk).await.map_err(SyncError::Write)
    }

    fn finish(self) -> Result<Fetched, SyncError> {
        let header = match self.header {
            Some(header) => header,
            // A stream that ended before its header was complete is no snapshot.
            None => return Err(SyncError::Unterminated(self.bytes)),
        };
        Ok(Fetched {
            bytes: self.bytes,
            sha256: hex::encode(self.hash.finalize()),
            header,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rdb() -> Vec<u8> {
        let mut rdb = b"REDIS0011\xfa\x09redis-ver\x057.2.4\xfe\x00\xfb\x01\x00".to_vec();
        rdb.extend([0, 1, b'k', 1, b'v', 0xFF]);
        rdb.extend([0u8; 8]);
        rdb
    }

    async fn copied(wire: Vec<u8>, size: Size) -> (Result<Fetched, SyncError>, Vec<u8>) {
        let mut out = Vec::new();
        let result = copy_payload(&mut wire.as_slice(), size, &mut out).await;
        (result, out)
    }

    #[tokio::test]
    async fn a_sized_payload_is_copied_exactly() {
        let payload = rdb();
        let mut wire = payload.clone();
        wire.extend_from_slice(b"+replication stream that is not ours");
        let (fetched, out) = copied(wire, Size::Bytes(payload.len() as u64)).await;
        let fetched = fetched.unwrap();
        assert_eq!(out, payload);
        assert_eq!(fetched.bytes, payload.len() as u64);
        assert_eq!(fetched.sha256, hex::encode(Sha256::digest(&payload)));
        assert_eq!(fetched.header.keys, Some(1));
    }

    #[tokio::test]
    async fn a_diskless_payload_stops_at_its_mark_which_is_not_copied() {
        let mark = b"0123456789012345678901234567890123456789".to_vec();
        let payload = rdb();
        let mut wire = payload.clone();
        wire.extend_from_slice(&mark);
        let (fetched, out) = copied(wire, Size::UntilMark(mark)).await;
        assert_eq!(fetched.unwrap().bytes, payload.len() as u64);
        assert_eq!(out, payload);
    }

    #[tokio::test]
    async fn a_cut_stream_is_an_error_not_a_short_backup() {
        let payload = rdb();
        let (fetched, _) = copied(payload[..10].to_vec(), Size::Bytes(payload.len() as u64)).await;
        assert!(matches!(fetched, Err(SyncError::Truncated { got: 10, .. })));
        let mark = vec![b'x'; EOF_MARK_LEN];
        let (fetched, _) = copied(payload, Size::UntilMark(mark)).await;
        assert!(matches!(fetched, Err(SyncError::Unterminated(_))));
    }

    #[test]
    fn sizes_are_read_from_the_bulk_header() {
        assert_eq!(parse_size("$1234").unwrap(), Size::Bytes(1234));
        let mark = "a".repeat(EOF_MARK_LEN);
        assert_eq!(
            parse_size(&format!("$EOF:{mark}")).unwrap(),
            Size::UntilMark(mark.into_bytes())
        );
        assert!(matches!(
            parse_size("-NOPERM this user has no permissions to run the 'sync' command"),
            Err(SyncError::Refused {
                command: "SYNC",
                ..
            })
        ));
    }
}
