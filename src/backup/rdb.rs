//! What a backup learns from the first bytes of a shard's RDB stream, without parsing values:
//! that it is an RDB at all (a primary that answers `SYNC` with something else is refused
//! before anything is uploaded), the RDB format version, the Valkey version that wrote it
//! (`valkey-ver`/`redis-ver` aux field) and how many keys database 0 holds (its `RESIZEDB`
//! opcode). All of it sits before the first key, so the upload never waits for more.

/// The header of an RDB file, as far as the first key.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RdbHeader {
    /// `REDIS0011` → 11; Valkey 9 writes `VALKEY080`-style magics (→ 80).
    pub format_version: u32,
    /// The `valkey-ver` (or `redis-ver`) aux field.
    pub server_version: Option<String>,
    /// Keys in database 0 (`RESIZEDB`), when the file has one (an empty dataset has none).
    pub keys: Option<u64>,
    /// Keys with a time to live in database 0 (`RESIZEDB`).
    pub keys_with_ttl: Option<u64>,
}

#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum RdbError {
    #[error("not an RDB stream: it starts with {0:?}")]
    NotRdb(String),
    #[error("RDB header is malformed: {0}")]
    Malformed(&'static str),
}

const OP_SLOT_INFO: u8 = 0xF4;
const OP_FUNCTION: u8 = 0xF5;
const OP_MODULE_AUX: u8 = 0xF7;
const OP_AUX: u8 = 0xFA;
const OP_RESIZEDB: u8 = 0xFB;
const OP_SELECTDB: u8 = 0xFE;
const OP_EOF: u8 = 0xFF;

/// Parses the header from `bytes`, the start of the stream. `Ok(None)`: more bytes are needed.
pub fn parse_header(bytes: &[u8]) -> Result<Option<RdbHeader>, RdbError> {
    if bytes.len() < 9 {
        return check_magic_prefix(bytes).map(|_| None);
    }
    let format_version = magic_version(&bytes[..9])?;
    let mut header = RdbHeader {
        format_version,
        ..Default::default()
    };
    let mut reader = Reader { bytes, at: 9 };
    loop {
        let Some(op) = reader.byte() else {
            return Ok(None);
        };
        let step = match op {
            OP_AUX => reader.aux().map(|(key, value)| {
                if key == b"valkey-ver" || (key == b"redis-ver" && header.server_version.is_none())
                {
                    header.server_version = Some(String::from_utf8_lossy(&value).into_owned());
                }
            }),
            OP_SELECTDB => reader.length().map(|_| ()),
            OP_RESIZEDB => reader.length().zip(reader.length()).map(|(keys, ttl)| {
                header.keys = Some(keys);
                header.keys_with_ttl = Some(ttl);
            }),
            // What follows the first RESIZEDB is per-slot sizes, functions or keys: done.
            _ if header.keys.is_some() => return Ok(Some(header)),
            OP_EOF => return Ok(Some(header)),
            OP_FUNCTION | OP_MODULE_AUX | OP_SLOT_INFO => {
                // Functions and module data precede the keys of an empty cluster member too;
                // the key count is then unknown, not zero.
                return Ok(Some(header));
            }
            // A value type byte: a key without a RESIZEDB before it.
            _ => return Ok(Some(header)),
        };
        if step.is_none() {
            return Ok(None);
        }
    }
}

fn check_magic_prefix(bytes: &[u8]) -> Result<(), RdbError> {
    let fits = |magic: &[u8]| magic.starts_with(&bytes[..bytes.len().min(magic.len())]);
    if fits(b"REDIS") || fits(b"VALKEY") {
        Ok(())
    } else {
        Err(RdbError::NotRdb(
            String::from_utf8_lossy(bytes).into_owned(),
        ))
    }
}

fn magic_version(magic: &[u8]) -> Result<u32, RdbError> {
    let digits = magic
        .strip_prefix(b"REDIS")
        .or_else(|| magic.strip_prefix(b"VALKEY"))
        .ok_or_else(|| RdbError::NotRdb(String::from_utf8_lossy(magic).into_owned()))?;
    std::str::from_utf8(digits)
        .ok()
        .and_then(|d| d.parse().ok())
        .ok_or(RdbError::Malformed("the magic's version is not a number"))
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

/// An RDB length, or a special string encoding (integer or LZF) in the low six bits.
enum Length {
    Plain(u64),
    Encoded(u8),
}

impl Reader<'_> {
    fn byte(&mut self) -> Option<u8> {
        let b = *self.bytes.get(self.at)?;
        self.at += 1;
        Some(b)
    }

    fn take(&mut self, n: usize) -> Option<&[u8]> {
        let end = self.at.checked_add(n)?;
        let slice = self.bytes.get(self.at..end)?;
        self.at = end;
        Some(slice)
    }

    fn raw_length(&mut self) -> Option<Length> {
        let first = self.byte()?;
        Some(match first >> 6 {
            0 => Length::Plain(u64::from(first & 0x3F)),
            1 => Length::Plain((u64::from(first & 0x3F) << 8) | u64::from(self.byte()?)),
            2 if first == 0x80 => Length::Plain(u64::from(u32::from_be_bytes(
                self.take(4)?.try_into().ok()?,
            ))),
            2 => Length::Plain(u64::from_be_bytes(self.take(8)?.try_into().ok()?)),
            _ => Length::Encoded(first & 0x3F),
        })
    }

    fn length(&mut self) -> Option<u64> {
        match self.raw_length()? {
            Length::Plain(n) => Some(n),
            Length::Encoded(_) => None,
        }
    }

    /// A string: raw bytes, an integer as its decimal text, or an LZF-compressed string as
    /// an empty value (never an aux field this module reads).
    fn string(&mut self) -> Option<Vec<u8>> {
        match self.raw_length()? {
            Length::Plain(n) => self.take(usize::try_from(n).ok()?).map(<[u8]>::to_vec),
            Length::Encoded(0) => Some((self.byte()? as i8).to_string().into_bytes()),
            Length::Encoded(1) => {
                let v = i16::from_le_bytes(self.take(2)?.try_into().ok()?);
                Some(v.to_string().into_bytes())
            }
            Length::Encoded(2) => {
                let v = i32::from_le_bytes(self.take(4)?.try_into().ok()?);
                Some(v.to_string().into_bytes())
            }
            Length::Encoded(_) => {
                let compressed = self.length()?;
                let _uncompressed = self.length()?;
                self.take(usize::try_from(compressed).ok()?)?;
                Some(Vec::new())
            }
        }
    }

    fn aux(&mut self) -> Option<(Vec<u8>, Vec<u8>)> {
        let key = self.string()?;
        let value = self.string()?;
        Some((key, value))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn aux(key: &str, value: &[u8]) -> Vec<u8> {
        let mut out = vec![OP_AUX, key.len() as u8];
        out.extend_from_slice(key.as_bytes());
        out.extend_from_slice(value);
        out
    }

    fn plain(s: &str) -> Vec<u8> {
        let mut out = vec![s.len() as u8];
        out.extend_from_slice(s.as_bytes());
        out
    }

    fn sample() -> Vec<u8> {
        let mut rdb = b"REDIS0011".to_vec();
        rdb.extend(aux("valkey-ver", &plain("9.0.1")));
        rdb.extend(aux("redis-bits", &[0xC0, 64]));
        rdb.extend(aux("ctime", &[0xC2, 1, 2, 3, 4]));
        rdb.extend(aux("used-mem", &[0xC2, 1, 2, 3, 4]));
        rdb.extend([OP_SELECTDB, 0, OP_RESIZEDB, 0x41, 0x00, 3]);
        rdb.extend([0, 1, b'k', 1, b'v', OP_EOF]);
        rdb
    }

    #[test]
    fn reads_version_and_key_counts_before_the_first_key() {
        let header = parse_header(&sample()).unwrap().unwrap();
        assert_eq!(
            header,
            RdbHeader {
                format_version: 11,
                server_version: Some("9.0.1".into()),
                keys: Some(256),
                keys_with_ttl: Some(3),
            }
        );
    }

    #[test]
    fn every_prefix_asks_for_more_until_the_key_count() {
        let rdb = sample();
        let complete_at = rdb.iter().position(|b| *b == OP_RESIZEDB).unwrap() + 4;
        for end in 0..complete_at {
            assert_eq!(parse_header(&rdb[..end]), Ok(None), "prefix of {end} bytes");
        }
        assert!(parse_header(&rdb[..=complete_at]).unwrap().is_some());
    }

    #[test]
    fn an_empty_dataset_ends_at_eof_without_a_key_count() {
        let mut rdb = b"VALKEY080".to_vec();
        rdb.extend(aux("redis-ver", &plain("7.2.4")));
        rdb.push(OP_EOF);
        let header = parse_header(&rdb).unwrap().unwrap();
        assert_eq!(header.format_version, 80);
        assert_eq!(header.server_version.as_deref(), Some("7.2.4"));
        assert_eq!(header.keys, None);
    }

    #[test]
    fn anything_else_is_refused_at_once() {
        assert!(matches!(parse_header(b"-ERR"), Err(RdbError::NotRdb(_))));
        assert!(matches!(
            parse_header(b"+FULLRESYNC 0123"),
            Err(RdbError::NotRdb(_))
        ));
        assert_eq!(parse_header(b"REDIS0"), Ok(None));
    }

    #[test]
    fn long_lengths_are_read() {
        let mut rdb = b"REDIS0011".to_vec();
        rdb.extend([OP_SELECTDB, 0, OP_RESIZEDB, 0x80, 0, 1, 0, 0, 0]);
        rdb.push(0);
        let header = parse_header(&rdb).unwrap().unwrap();
        assert_eq!(header.keys, Some(65536));
        assert_eq!(header.keys_with_ttl, Some(0));
    }
}
