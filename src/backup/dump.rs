//! Every key of a shard's RDB snapshot as the DUMP payload Valkey gives for it, so that a
//! restore replays a backup into a running cluster with `RESTORE key ttl payload REPLACE
//! ABSTTL` (and its function libraries with `FUNCTION LOAD REPLACE`): the members check and
//! decode each value themselves, with their own code for every type and encoding.
//!
//! A DUMP payload is the value exactly as an RDB holds it (`rdbSaveObject`) behind its type
//! byte, then the RDB version (2 bytes) and a CRC-64 (Jones, Valkey's `crc64`) of all that
//! (8 bytes), both little-endian. So values are never decoded here: the parser only finds
//! where each one ends (lengths, string encodings, each type's layout) and copies its bytes.
//! It decodes only what it hands over as text: key names and function code (which can be
//! integer-encoded or LZF-compressed).
//!
//! Pure: no I/O. The caller pushes the stream's chunks as they arrive ([`RdbKeys::push`]) and
//! takes entries as they complete ([`RdbKeys::next`]). A value split across many chunks is
//! walked once, element by element as its bytes arrive (never again from its start), and the
//! bytes walked leave the buffer, so memory stays about one value.

/// What a snapshot holds, in stream order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Entry {
    Key(DumpedKey),
    /// A function library's code (`RDB_OPCODE_FUNCTION2`), for `FUNCTION LOAD REPLACE`.
    Function(Vec<u8>),
    /// The end marker and the file's checksum were read (and the checksum matched, unless the
    /// writer had checksums off): the snapshot is complete.
    End,
}

/// One key, ready for `RESTORE key ttl payload REPLACE ABSTTL`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DumpedKey {
    pub key: Vec<u8>,
    /// Absolute expiry in Unix milliseconds (what `PEXPIRETIME` says); `None`: persistent.
    pub expire_at_ms: Option<i64>,
    /// The full DUMP payload: type byte, value, RDB version and CRC-64.
    pub payload: Vec<u8>,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DumpError {
    #[error("not an RDB stream: it starts with {0:?}")]
    NotRdb(String),
    #[error("unknown RDB type or opcode {byte:#04x} at offset {offset}")]
    UnknownType { byte: u8, offset: u64 },
    #[error("{what} at offset {offset} is not supported")]
    Unsupported { what: &'static str, offset: u64 },
    #[error("keys of database {db} at offset {offset}: a cluster member has only database 0")]
    Database { db: u64, offset: u64 },
    #[error("malformed RDB at offset {offset}: {what}")]
    Malformed { what: String, offset: u64 },
    #[error("RDB checksum mismatch: the file says {stored:#018x}, its bytes give {computed:#018x}")]
    Checksum { stored: u64, computed: u64 },
    #[error("the RDB stream stops at offset {offset}, before its end marker and checksum")]
    Truncated { offset: u64 },
    #[error("{count} bytes follow the RDB's checksum (at offset {offset})")]
    TrailingBytes { offset: u64, count: u64 },
}

// Value types (rdb.h `RDB_TYPE_*`).
const TYPE_STRING: u8 = 0;
const TYPE_LIST: u8 = 1;
const TYPE_SET: u8 = 2;
const TYPE_ZSET: u8 = 3;
const TYPE_HASH: u8 = 4;
const TYPE_ZSET_2: u8 = 5;
const TYPE_MODULE_PRE_GA: u8 = 6;
const TYPE_MODULE_2: u8 = 7;
const TYPE_HASH_ZIPMAP: u8 = 9;
const TYPE_LIST_ZIPLIST: u8 = 10;
const TYPE_SET_INTSET: u8 = 11;
const TYPE_ZSET_ZIPLIST: u8 = 12;
const TYPE_HASH_ZIPLIST: u8 = 13;
const TYPE_LIST_QUICKLIST: u8 = 14;
const TYPE_STREAM_LISTPACKS: u8 = 15;
const TYPE_HASH_LISTPACK: u8 = 16;
const TYPE_ZSET_LISTPACK: u8 = 17;
const TYPE_LIST_QUICKLIST_2: u8 = 18;
const TYPE_STREAM_LISTPACKS_2: u8 = 19;
const TYPE_SET_LISTPACK: u8 = 20;
const TYPE_STREAM_LISTPACKS_3: u8 = 21;
/// A hash with field expirations (Valkey 9.0, RDB 80): each field's value is followed by its
/// expiry in milliseconds (-1: none).
const TYPE_HASH_2: u8 = 22;

// Opcodes (rdb.h `RDB_OPCODE_*`).
const OP_SLOT_IMPORT: u8 = 0xF3;
const OP_SLOT_INFO: u8 = 0xF4;
const OP_FUNCTION2: u8 = 0xF5;
const OP_FUNCTION_PRE_GA: u8 = 0xF6;
const OP_MODULE_AUX: u8 = 0xF7;
const OP_IDLE: u8 = 0xF8;
const OP_FREQ: u8 = 0xF9;
const OP_AUX: u8 = 0xFA;
const OP_RESIZEDB: u8 = 0xFB;
const OP_EXPIRETIME_MS: u8 = 0xFC;
const OP_EXPIRETIME: u8 = 0xFD;
const OP_SELECTDB: u8 = 0xFE;
const OP_EOF: u8 = 0xFF;

// Special string encodings (rdb.h `RDB_ENC_*`).
const ENC_INT8: u8 = 0;
const ENC_INT16: u8 = 1;
const ENC_INT32: u8 = 2;
const ENC_LZF: u8 = 3;

// Typed data inside module values and module aux data (rdb.h `RDB_MODULE_OPCODE_*`).
const MODULE_EOF: u64 = 0;
const MODULE_SINT: u64 = 1;
const MODULE_UINT: u64 = 2;
const MODULE_FLOAT: u64 = 3;
const MODULE_DOUBLE: u64 = 4;
const MODULE_STRING: u64 = 5;

/// `REDIS0011`, `VALKEY080`.
const MAGIC_LEN: usize = 9;
/// The first RDB version that ends with a checksum.
const FIRST_CHECKSUMMED_VERSION: u32 = 5;

/// One step of the walk over a value's (or an opcode's) bytes. Each step is read whole or not
/// at all, so a walk stopped for lack of bytes resumes at the step it stopped at.
#[derive(Clone, Copy, Debug)]
enum Op {
    /// A length (`rdbSaveLen`).
    Len,
    /// A string: raw, integer-encoded or LZF-compressed.
    Str,
    /// Raw bytes of a fixed size: binary doubles, millisecond times, stream IDs.
    Fixed(usize),
    /// A score of the first sorted-set encoding: a length byte and that much text, or 253-255
    /// alone for NaN and the infinities.
    TextScore,
    /// A length n, then the body n times.
    Repeat(&'static [Op]),
    /// Module data: typed items until the module EOF.
    Module,
}

const STRING: &[Op] = &[Op::Str];
/// Lists, sets, quicklists of ziplists: a count of strings.
const STRINGS: &[Op] = &[Op::Repeat(&[Op::Str])];
const ZSET_TEXT_SCORES: &[Op] = &[Op::Repeat(&[Op::Str, Op::TextScore])];
const ZSET_BINARY_SCORES: &[Op] = &[Op::Repeat(&[Op::Str, Op::Fixed(8)])];
const HASH: &[Op] = &[Op::Repeat(&[Op::Str, Op::Str])];
const HASH_WITH_FIELD_EXPIRY: &[Op] = &[Op::Repeat(&[Op::Str, Op::Str, Op::Fixed(8)])];
/// Nodes of a container kind (plain or packed) and their data.
const QUICKLIST_2: &[Op] = &[Op::Repeat(&[Op::Len, Op::Str])];
/// The module type id, then the module's typed items.
const MODULE_VALUE: &[Op] = &[Op::Len, Op::Module];

/// A stream's radix tree nodes: the master ID (16 bytes as a string) and a listpack.
const STREAM_NODES: Op = Op::Repeat(&[Op::Str, Op::Str]);
/// A group's pending entries: ID, delivery time, delivery count.
const STREAM_GROUP_PEL: Op = Op::Repeat(&[Op::Fixed(16), Op::Fixed(8), Op::Len]);
/// A consumer's pending entries: IDs only (they point into the group's).
const STREAM_CONSUMER_PEL: Op = Op::Repeat(&[Op::Fixed(16)]);
/// Consumers: name, seen time, (listpacks 3: active time,) pending IDs.
const STREAM_CONSUMERS: Op = Op::Repeat(&[Op::Str, Op::Fixed(8), STREAM_CONSUMER_PEL]);
const STREAM_CONSUMERS_3: Op =
    Op::Repeat(&[Op::Str, Op::Fixed(8), Op::Fixed(8), STREAM_CONSUMER_PEL]);
/// Groups: name, last ID (ms, seq), (listpacks 2+: entries read,) PEL, consumers.
const STREAM_GROUPS: Op = Op::Repeat(&[
    Op::Str,
    Op::Len,
    Op::Len,
    STREAM_GROUP_PEL,
    STREAM_CONSUMERS,
]);
const STREAM_GROUPS_2: Op = Op::Repeat(&[
    Op::Str,
    Op::Len,
    Op::Len,
    Op::Len,
    STREAM_GROUP_PEL,
    STREAM_CONSUMERS,
]);
const STREAM_GROUPS_3: Op = Op::Repeat(&[
    Op::Str,
    Op::Len,
    Op::Len,
    Op::Len,
    STREAM_GROUP_PEL,
    STREAM_CONSUMERS_3,
]);
/// Nodes, length, last ID, groups.
const STREAM: &[Op] = &[STREAM_NODES, Op::Len, Op::Len, Op::Len, STREAM_GROUPS];
/// Nodes; length, last ID, first ID, max deleted ID, entries added (8 lengths); groups.
const STREAM_2: &[Op] = &[
    STREAM_NODES,
    Op::Len,
    Op::Len,
    Op::Len,
    Op::Len,
    Op::Len,
    Op::Len,
    Op::Len,
    Op::Len,
    STREAM_GROUPS_2,
];
const STREAM_3: &[Op] = &[
    STREAM_NODES,
    Op::Len,
    Op::Len,
    Op::Len,
    Op::Len,
    Op::Len,
    Op::Len,
    Op::Len,
    Op::Len,
    STREAM_GROUPS_3,
];

// Opcodes whose data is skipped.
const AUX: &[Op] = &[Op::Str, Op::Str];
const RESIZEDB: &[Op] = &[Op::Len, Op::Len];
/// Foreign (Redis 7.4) per-slot sizes: slot, keys, keys with an expiry.
const SLOT_INFO: &[Op] = &[Op::Len, Op::Len, Op::Len];
/// An atomic slot migration being imported (Valkey 9.0): job name, slot ranges.
const SLOT_IMPORT: &[Op] = &[Op::Str, Op::Repeat(&[Op::Len, Op::Len])];
/// Module id, the `when` (as an unsigned-integer item), then the module's items.
const MODULE_AUX: &[Op] = &[Op::Len, Op::Len, Op::Len, Op::Module];
const IDLE: &[Op] = &[Op::Len];
const FREQ: &[Op] = &[Op::Fixed(1)];

/// The walk of a value type's bytes; `Ok(None)`: not a value type.
fn value_layout(type_byte: u8, offset: u64) -> Result<Option<&'static [Op]>, DumpError> {
    Ok(Some(match type_byte {
        TYPE_STRING => STRING,
        TYPE_LIST | TYPE_SET | TYPE_LIST_QUICKLIST => STRINGS,
        TYPE_ZSET => ZSET_TEXT_SCORES,
        TYPE_ZSET_2 => ZSET_BINARY_SCORES,
        TYPE_HASH => HASH,
        TYPE_HASH_2 => HASH_WITH_FIELD_EXPIRY,
        TYPE_MODULE_2 => MODULE_VALUE,
        // One blob each: zipmap, ziplist, intset or listpack.
        TYPE_HASH_ZIPMAP | TYPE_LIST_ZIPLIST | TYPE_SET_INTSET | TYPE_ZSET_ZIPLIST
        | TYPE_HASH_ZIPLIST | TYPE_HASH_LISTPACK | TYPE_ZSET_LISTPACK | TYPE_SET_LISTPACK => STRING,
        TYPE_LIST_QUICKLIST_2 => QUICKLIST_2,
        TYPE_STREAM_LISTPACKS => STREAM,
        TYPE_STREAM_LISTPACKS_2 => STREAM_2,
        TYPE_STREAM_LISTPACKS_3 => STREAM_3,
        TYPE_MODULE_PRE_GA => {
            return Err(DumpError::Unsupported {
                what: "a module value of the 4.0 release candidates",
                offset,
            });
        }
        _ => return Ok(None),
    }))
}

/// The walk of an opcode's data when it is skipped.
fn skipped_layout(opcode: u8) -> Option<&'static [Op]> {
    Some(match opcode {
        OP_AUX => AUX,
        OP_RESIZEDB => RESIZEDB,
        OP_SLOT_INFO => SLOT_INFO,
        OP_SLOT_IMPORT => SLOT_IMPORT,
        OP_MODULE_AUX => MODULE_AUX,
        OP_IDLE => IDLE,
        OP_FREQ => FREQ,
        _ => return None,
    })
}

/// Where a read stops.
enum Stop {
    /// At least this many bytes (from where the read started) are needed.
    Short(usize),
    Bad(DumpError),
}

impl From<DumpError> for Stop {
    fn from(error: DumpError) -> Self {
        Stop::Bad(error)
    }
}

/// An RDB length, or a special string encoding in the low six bits.
enum Length {
    Plain(u64),
    Encoded(u8),
}

/// A string as stored, not decoded.
enum StoredString<'a> {
    Raw(&'a [u8]),
    Integer(i64),
    Lzf { data: &'a [u8], original_len: usize },
}

/// Reads from the unconsumed bytes; `base` is the stream offset of the first one.
struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
    base: u64,
}

impl<'a> Cursor<'a> {
    fn new(bytes: &'a [u8], base: u64) -> Self {
        Cursor { bytes, at: 0, base }
    }

    fn offset(&self) -> u64 {
        self.base + self.at as u64
    }

    fn malformed(&self, what: impl Into<String>) -> Stop {
        Stop::Bad(DumpError::Malformed {
            what: what.into(),
            offset: self.offset(),
        })
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], Stop> {
        let end = self
            .at
            .checked_add(n)
            .ok_or_else(|| self.malformed(format!("a size of {n} bytes")))?;
        let slice = self.bytes.get(self.at..end).ok_or(Stop::Short(end))?;
        self.at = end;
        Ok(slice)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], Stop> {
        let mut array = [0; N];
        array.copy_from_slice(self.take(N)?);
        Ok(array)
    }

    fn byte(&mut self) -> Result<u8, Stop> {
        Ok(self.array::<1>()?[0])
    }

    fn length_or_encoding(&mut self) -> Result<Length, Stop> {
        let first = self.byte()?;
        Ok(match first >> 6 {
            0 => Length::Plain(u64::from(first & 0x3F)),
            1 => Length::Plain((u64::from(first & 0x3F) << 8) | u64::from(self.byte()?)),
            3 => Length::Encoded(first & 0x3F),
            _ if first == 0x80 => Length::Plain(u64::from(u32::from_be_bytes(self.array()?))),
            _ if first == 0x81 => Length::Plain(u64::from_be_bytes(self.array()?)),
            _ => {
                self.at -= 1;
                return Err(self.malformed(format!("unknown length encoding {first:#04x}")));
            }
        })
    }

    fn length(&mut self) -> Result<u64, Stop> {
        match self.length_or_encoding()? {
            Length::Plain(n) => Ok(n),
            Length::Encoded(encoding) => {
                Err(self.malformed(format!("string encoding {encoding} where a length belongs")))
            }
        }
    }

    fn size(&mut self) -> Result<usize, Stop> {
        let n = self.length()?;
        usize::try_from(n).map_err(|_| self.malformed(format!("a length of {n}")))
    }

    fn stored_string(&mut self) -> Result<StoredString<'a>, Stop> {
        Ok(match self.length_or_encoding()? {
            Length::Plain(n) => {
                let n = usize::try_from(n)
                    .map_err(|_| self.malformed(format!("a string of {n} bytes")))?;
                StoredString::Raw(self.take(n)?)
            }
            Length::Encoded(ENC_INT8) => {
                StoredString::Integer(i8::from_le_bytes(self.array()?).into())
            }
            Length::Encoded(ENC_INT16) => {
                StoredString::Integer(i16::from_le_bytes(self.array()?).into())
            }
            Length::Encoded(ENC_INT32) => {
                StoredString::Integer(i32::from_le_bytes(self.array()?).into())
            }
            Length::Encoded(ENC_LZF) => {
                let compressed_len = self.size()?;
                let original_len = self.size()?;
                let data = self.take(compressed_len)?;
                StoredString::Lzf { data, original_len }
            }
            Length::Encoded(other) => {
                return Err(self.malformed(format!("unknown string encoding {other}")));
            }
        })
    }

    /// A string decoded: integers as their decimal text, LZF decompressed.
    fn string(&mut self) -> Result<Vec<u8>, Stop> {
        let offset = self.offset();
        match self.stored_string()? {
            StoredString::Raw(bytes) => Ok(bytes.to_vec()),
            StoredString::Integer(value) => Ok(value.to_string().into_bytes()),
            StoredString::Lzf { data, original_len } => {
                lzf_decompress(data, original_len).ok_or(Stop::Bad(DumpError::Malformed {
                    what: format!("LZF data that does not decompress to {original_len} bytes"),
                    offset,
                }))
            }
        }
    }
}

/// Where a walk is inside a value: one frame per nesting level.
#[derive(Debug)]
enum Frame {
    /// At step `next` of `layout`, with `rounds_left` passes over it (this one included).
    Layout {
        layout: &'static [Op],
        next: usize,
        rounds_left: u64,
    },
    /// Among a module's typed items.
    Module,
}

/// What a step did to the walk.
enum Then {
    Next,
    Enter(Frame),
    Leave,
}

/// Reads one step from the cursor and moves the walk past it. On `Stop` the walk is as it
/// was (the step is read again once the bytes are there).
fn advance(frames: &mut Vec<Frame>, cursor: &mut Cursor) -> Result<(), Stop> {
    let Some(frame) = frames.last_mut() else {
        return Ok(());
    };
    let then = match frame {
        Frame::Layout {
            layout,
            next,
            rounds_left,
        } => match layout.get(*next) {
            Some(op) => read_op(*op, cursor)?,
            None if *rounds_left > 1 => {
                *rounds_left -= 1;
                *next = 0;
                return Ok(());
            }
            None => Then::Leave,
        },
        Frame::Module => read_module_item(cursor)?,
    };
    match then {
        Then::Leave => {
            frames.pop();
        }
        Then::Next | Then::Enter(_) => {
            if let Some(Frame::Layout { next, .. }) = frames.last_mut() {
                *next += 1;
            }
            if let Then::Enter(child) = then {
                frames.push(child);
            }
        }
    }
    Ok(())
}

fn read_op(op: Op, cursor: &mut Cursor) -> Result<Then, Stop> {
    match op {
        Op::Len => cursor.length().map(|_| Then::Next),
        Op::Str => cursor.stored_string().map(|_| Then::Next),
        Op::Fixed(n) => cursor.take(n).map(|_| Then::Next),
        Op::TextScore => {
            let len = cursor.byte()?;
            // 253, 254, 255: NaN, +inf, -inf, with no text.
            if len < 253 {
                cursor.take(usize::from(len))?;
            }
            Ok(Then::Next)
        }
        Op::Repeat(body) => match cursor.length()? {
            0 => Ok(Then::Next),
            rounds => Ok(Then::Enter(Frame::Layout {
                layout: body,
                next: 0,
                rounds_left: rounds,
            })),
        },
        Op::Module => Ok(Then::Enter(Frame::Module)),
    }
}

/// One typed item of module data (as `rdbLoadCheckModuleValue` reads them), or its end.
fn read_module_item(cursor: &mut Cursor) -> Result<Then, Stop> {
    let item_offset = cursor.offset();
    match cursor.length()? {
        MODULE_EOF => Ok(Then::Leave),
        MODULE_SINT | MODULE_UINT => cursor.length().map(|_| Then::Next),
        MODULE_FLOAT => cursor.take(4).map(|_| Then::Next),
        MODULE_DOUBLE => cursor.take(8).map(|_| Then::Next),
        MODULE_STRING => cursor.stored_string().map(|_| Then::Next),
        other => Err(Stop::Bad(DumpError::Malformed {
            what: format!("unknown module data opcode {other}"),
            offset: item_offset,
        })),
    }
}

/// The opcode's data or key's value being walked.
struct Walk {
    frames: Vec<Frame>,
    /// The key whose value this is, with its payload so far; `None`: an opcode's data,
    /// skipped.
    key: Option<KeyInProgress>,
}

struct KeyInProgress {
    key: Vec<u8>,
    expire_at_ms: Option<i64>,
    /// Type byte and the value bytes walked so far.
    payload: Vec<u8>,
}

impl Walk {
    fn new(layout: &'static [Op], key: Option<KeyInProgress>) -> Self {
        Walk {
            frames: vec![Frame::Layout {
                layout,
                next: 0,
                rounds_left: 1,
            }],
            key,
        }
    }

    fn into_entry(self, footer_version: u16) -> Option<Entry> {
        let KeyInProgress {
            key,
            expire_at_ms,
            mut payload,
        } = self.key?;
        payload.extend_from_slice(&footer_version.to_le_bytes());
        let crc = crc64_jones(0, &payload);
        payload.extend_from_slice(&crc.to_le_bytes());
        Some(Entry::Key(DumpedKey {
            key,
            expire_at_ms,
            payload,
        }))
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Magic,
    Body,
    Checksum,
    Done,
}

/// The keys (and function libraries) of an RDB stream, as DUMP payloads; see the module.
pub struct RdbKeys {
    /// Bytes received and not yet consumed (from `start`).
    buffer: Vec<u8>,
    start: usize,
    /// Stream offset of `buffer[0]`.
    base: u64,
    /// Bytes needed from `start` before reading again: the read that stopped short said so.
    need: usize,
    phase: Phase,
    /// From the magic; `None` before it.
    version: Option<u32>,
    /// An expiry opcode's time, for the key that follows.
    expire_at_ms: Option<i64>,
    walk: Option<Walk>,
    /// CRC-64 of every byte consumed, for the file's checksum.
    crc: u64,
    /// Once the stream is found bad, every later call says so again.
    failed: Option<DumpError>,
}

impl Default for RdbKeys {
    fn default() -> Self {
        Self::new()
    }
}

impl RdbKeys {
    pub fn new() -> Self {
        RdbKeys {
            buffer: Vec::new(),
            start: 0,
            base: 0,
            need: 0,
            phase: Phase::Magic,
            version: None,
            expire_at_ms: None,
            walk: None,
            crc: 0,
            failed: None,
        }
    }

    /// The RDB format version from the magic, once read.
    pub fn rdb_version(&self) -> Option<u32> {
        self.version
    }

    /// Bytes of the stream consumed so far.
    pub fn position(&self) -> u64 {
        self.base + self.start as u64
    }

    /// Appends the stream's next bytes.
    pub fn push(&mut self, chunk: &[u8]) {
        // Drop consumed bytes once they are at least half the buffer: each byte is moved a
        // bounded number of times however the stream is cut.
        if self.start > 0 && self.start >= self.buffer.len() - self.start {
            self.buffer.drain(..self.start);
            self.base += self.start as u64;
            self.start = 0;
            // A big value's bytes are gone: do not keep its capacity for the small ones.
            let keep = self.buffer.len().max(1 << 20);
            if self.buffer.capacity() > 4 * keep {
                self.buffer.shrink_to(keep);
            }
        }
        self.buffer.extend_from_slice(chunk);
    }

    /// The next complete entry, or `Ok(None)` until more bytes are pushed (and after
    /// [`Entry::End`]). A value split across chunks is walked on from where it stopped (only the
    /// step that ran short is read again), and not before the bytes that step asked for are
    /// there.
    // Not an iterator: it can fail, and `None` means "not yet", not "no more".
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Result<Option<Entry>, DumpError> {
        if let Some(error) = &self.failed {
            return Err(error.clone());
        }
        loop {
            if self.buffer.len() - self.start < self.need {
                return Ok(None);
            }
            let step = match self.phase {
                Phase::Magic => self.read_magic(),
                Phase::Body if self.walk.is_some() => self.continue_walk(),
                Phase::Body => self.read_item(),
                Phase::Checksum => self.read_checksum(),
                Phase::Done => return Ok(None),
            };
            match step {
                Ok(entry) => {
                    self.need = 0;
                    if entry.is_some() {
                        return Ok(entry);
                    }
                }
                Err(Stop::Short(need)) => {
                    self.need = need;
                    return Ok(None);
                }
                Err(Stop::Bad(error)) => {
                    self.failed = Some(error.clone());
                    return Err(error);
                }
            }
        }
    }

    /// Whether the stream ended exactly after its end marker and checksum. Call once the
    /// input is over and [`RdbKeys::next`] has returned `Ok(None)`.
    pub fn finish(&self) -> Result<(), DumpError> {
        if let Some(error) = &self.failed {
            return Err(error.clone());
        }
        let left = (self.buffer.len() - self.start) as u64;
        match self.phase {
            Phase::Done if left == 0 => Ok(()),
            Phase::Done => Err(DumpError::TrailingBytes {
                offset: self.position(),
                count: left,
            }),
            _ => Err(DumpError::Truncated {
                offset: self.base + self.buffer.len() as u64,
            }),
        }
    }

    fn cursor(&self) -> Cursor<'_> {
        Cursor::new(&self.buffer[self.start..], self.position())
    }

    /// Marks `n` bytes read: into the file checksum, and out of the buffer.
    fn consume(&mut self, n: usize) {
        self.crc = crc64_jones(self.crc, &self.buffer[self.start..self.start + n]);
        self.start += n;
    }

    fn read_magic(&mut self) -> Result<Option<Entry>, Stop> {
        let bytes = &self.buffer[self.start..];
        let Some(magic) = bytes.get(..MAGIC_LEN) else {
            let fits = |magic: &[u8]| magic.starts_with(&bytes[..bytes.len().min(magic.len())]);
            if fits(b"REDIS") || fits(b"VALKEY") {
                return Err(Stop::Short(bytes.len() + 1));
            }
            return Err(DumpError::NotRdb(String::from_utf8_lossy(bytes).into_owned()).into());
        };
        let version = magic_version(magic)?;
        self.version = Some(version);
        self.consume(MAGIC_LEN);
        self.phase = Phase::Body;
        Ok(None)
    }

    /// An opcode, or a key's type byte and name, when no walk is under way.
    fn read_item(&mut self) -> Result<Option<Entry>, Stop> {
        // The cursor borrows the buffer only: the fields an opcode sets stay writable.
        let mut cursor = Cursor::new(&self.buffer[self.start..], self.position());
        let offset = cursor.offset();
        let opcode = cursor.byte()?;
        let mut entry = None;
        match opcode {
            OP_EOF => match self.version {
                Some(version) if version >= FIRST_CHECKSUMMED_VERSION => {
                    self.phase = Phase::Checksum;
                }
                _ => {
                    self.phase = Phase::Done;
                    entry = Some(Entry::End);
                }
            },
            OP_SELECTDB => match cursor.length()? {
                0 => {}
                db => return Err(DumpError::Database { db, offset }.into()),
            },
            OP_EXPIRETIME => {
                let seconds = i32::from_le_bytes(cursor.array()?);
                self.expire_at_ms = Some(i64::from(seconds) * 1000);
            }
            OP_EXPIRETIME_MS => self.expire_at_ms = Some(i64::from_le_bytes(cursor.array()?)),
            OP_FUNCTION2 => entry = Some(Entry::Function(cursor.string()?)),
            OP_FUNCTION_PRE_GA => {
                let what = "a function library of the 7.0 release candidates";
                return Err(DumpError::Unsupported { what, offset }.into());
            }
            _ => {
                if let Some(layout) = skipped_layout(opcode) {
                    self.walk = Some(Walk::new(layout, None));
                } else if let Some(layout) = value_layout(opcode, offset)? {
                    let key = cursor.string()?;
                    let key = KeyInProgress {
                        key,
                        expire_at_ms: self.expire_at_ms.take(),
                        payload: vec![opcode],
                    };
                    self.walk = Some(Walk::new(layout, Some(key)));
                } else {
                    return Err(DumpError::UnknownType {
                        byte: opcode,
                        offset,
                    }
                    .into());
                }
            }
        }
        let used = cursor.at;
        self.consume(used);
        Ok(entry)
    }

    /// Walks the value (or skipped opcode data) under way as far as the bytes go.
    fn continue_walk(&mut self) -> Result<Option<Entry>, Stop> {
        let Some(walk) = self.walk.as_mut() else {
            return Ok(None);
        };
        while !walk.frames.is_empty() {
            let position = self.base + self.start as u64;
            let mut cursor = Cursor::new(&self.buffer[self.start..], position);
            advance(&mut walk.frames, &mut cursor)?;
            let walked = &self.buffer[self.start..self.start + cursor.at];
            self.crc = crc64_jones(self.crc, walked);
            if let Some(key) = walk.key.as_mut() {
                key.payload.extend_from_slice(walked);
            }
            self.start += cursor.at;
        }
        let footer_version = self
            .version
            .and_then(|v| u16::try_from(v).ok())
            .unwrap_or_default();
        Ok(self.walk.take().and_then(|w| w.into_entry(footer_version)))
    }

    fn read_checksum(&mut self) -> Result<Option<Entry>, Stop> {
        let stored = u64::from_le_bytes(self.cursor().array()?);
        // Zero: the writer had `rdbchecksum no`.
        if stored != 0 && stored != self.crc {
            let computed = self.crc;
            return Err(DumpError::Checksum { stored, computed }.into());
        }
        self.start += 8;
        self.phase = Phase::Done;
        Ok(Some(Entry::End))
    }
}

/// `REDIS0011` → 11, `VALKEY080` → 80. The version goes into every payload's 2-byte footer.
fn magic_version(magic: &[u8]) -> Result<u32, DumpError> {
    let digits = magic
        .strip_prefix(b"REDIS")
        .or_else(|| magic.strip_prefix(b"VALKEY"))
        .filter(|digits| digits.iter().all(u8::is_ascii_digit))
        .ok_or_else(|| DumpError::NotRdb(String::from_utf8_lossy(magic).into_owned()))?;
    std::str::from_utf8(digits)
        .ok()
        .and_then(|d| d.parse::<u32>().ok())
        .filter(|version| u16::try_from(*version).is_ok())
        .ok_or_else(|| DumpError::Malformed {
            what: format!(
                "magic {:?} has no usable version",
                String::from_utf8_lossy(magic)
            ),
            offset: 0,
        })
}

/// LZF decompression (`lzf_decompress`), for key names and function code; `None` unless the
/// data decompresses to exactly `expected_len` bytes.
fn lzf_decompress(input: &[u8], expected_len: usize) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(expected_len.min(input.len().saturating_mul(8)));
    let mut at = 0;
    while let Some(&control) = input.get(at) {
        at += 1;
        let control = usize::from(control);
        if control < 32 {
            // A run of control + 1 literal bytes.
            let run = input.get(at..at + control + 1)?;
            out.extend_from_slice(run);
            at += control + 1;
        } else {
            // A back reference: length in the top 3 bits (7: one more length byte follows),
            // distance in the low 5 bits and the next byte.
            let mut len = control >> 5;
            if len == 7 {
                len += usize::from(*input.get(at)?);
                at += 1;
            }
            let distance = ((control & 0x1F) << 8) + usize::from(*input.get(at)?) + 1;
            at += 1;
            let from = out.len().checked_sub(distance)?;
            for i in from..from + len + 2 {
                let byte = *out.get(i)?;
                out.push(byte);
            }
        }
        if out.len() > expected_len {
            return None;
        }
    }
    (out.len() == expected_len).then_some(out)
}

/// The CRC-64 of DUMP payloads and RDB files (Jones polynomial, reflected, no final xor:
/// Valkey's `crc64`), continued from `crc` (0 to start).
pub fn crc64_jones(mut crc: u64, bytes: &[u8]) -> u64 {
    let tables = &CRC64_TABLES;
    let mut words = bytes.chunks_exact(8);
    for word in &mut words {
        let mut le = [0; 8];
        le.copy_from_slice(word);
        let x = crc ^ u64::from_le_bytes(le);
        crc = (0..8).fold(0, |acc, i| {
            acc ^ tables[7 - i][((x >> (8 * i)) & 0xFF) as usize]
        });
    }
    for &byte in words.remainder() {
        crc = tables[0][((crc ^ u64::from(byte)) & 0xFF) as usize] ^ (crc >> 8);
    }
    crc
}

/// Slicing-by-8 tables: `[0]` is the bytewise table, `[k]` advances a byte through k more
/// zero bytes.
static CRC64_TABLES: [[u64; 256]; 8] = crc64_tables();

const fn crc64_tables() -> [[u64; 256]; 8] {
    const JONES_REFLECTED: u64 = 0x95AC_9329_AC4B_C9B5;
    let mut tables = [[0u64; 256]; 8];
    let mut i = 0;
    while i < 256 {
        let mut crc = i as u64;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ JONES_REFLECTED
            } else {
                crc >> 1
            };
            bit += 1;
        }
        tables[0][i] = crc;
        i += 1;
    }
    let mut k = 1;
    while k < 8 {
        let mut i = 0;
        while i < 256 {
            let previous = tables[k - 1][i];
            tables[k][i] = (previous >> 8) ^ tables[0][(previous & 0xFF) as usize];
            i += 1;
        }
        k += 1;
    }
    tables
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `rdbSaveLen`.
    fn len(n: u64) -> Vec<u8> {
        if n < 1 << 6 {
            vec![n as u8]
        } else if n < 1 << 14 {
            vec![0x40 | (n >> 8) as u8, n as u8]
        } else if n <= u64::from(u32::MAX) {
            let mut out = vec![0x80];
            out.extend_from_slice(&(n as u32).to_be_bytes());
            out
        } else {
            let mut out = vec![0x81];
            out.extend_from_slice(&n.to_be_bytes());
            out
        }
    }

    fn raw(bytes: &[u8]) -> Vec<u8> {
        let mut out = len(bytes.len() as u64);
        out.extend_from_slice(bytes);
        out
    }

    fn cat(parts: &[&[u8]]) -> Vec<u8> {
        parts.concat()
    }

    /// "abcabcabcabc" compressed by hand: a 3-byte literal run, then 9 bytes from 3 back.
    const LZF_ABC: [u8; 7] = [0x02, b'a', b'b', b'c', 0xE0, 0x00, 0x02];

    fn lzf_string() -> Vec<u8> {
        cat(&[&[0xC3], &len(7), &len(12), &LZF_ABC])
    }

    fn payload(type_byte: u8, value: &[u8], version: u16) -> Vec<u8> {
        let mut out = vec![type_byte];
        out.extend_from_slice(value);
        out.extend_from_slice(&version.to_le_bytes());
        let crc = crc64_jones(0, &out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    fn key(name: &[u8], expire_at_ms: Option<i64>, type_byte: u8, value: &[u8]) -> Entry {
        Entry::Key(DumpedKey {
            key: name.to_vec(),
            expire_at_ms,
            payload: payload(type_byte, value, 80),
        })
    }

    /// Values of every walk shape, each with the entry it must give.
    /// A stream of one node, one group with one pending entry owned by one consumer, in the
    /// layout of stream listpacks `version` (1, 2 or 3).
    fn stream_value(version: u8) -> Vec<u8> {
        let id = [7u8; 16];
        let mut out = cat(&[&len(1), &raw(&id), &raw(b"listpack-bytes")]);
        // Length and last ID; then (2 and 3) first ID, max deleted ID, entries added.
        out.extend(cat(&[&len(3), &len(1_700_000_000_000), &len(2)]));
        if version >= 2 {
            out.extend(cat(&[&len(1), &len(0), &len(0), &len(0), &len(3)]));
        }
        // A group: name, last ID, (2 and 3) entries read.
        out.extend(cat(&[&len(1), &raw(b"group"), &len(5), &len(0)]));
        if version >= 2 {
            out.extend(len(1));
        }
        let delivery = 1_700_000_000_001i64.to_le_bytes();
        out.extend(cat(&[&len(1), &id, &delivery, &len(1)]));
        // Its consumer: name, seen time, (3) active time, pending IDs.
        out.extend(cat(&[&len(1), &raw(b"alice"), &1i64.to_le_bytes()]));
        if version >= 3 {
            out.extend(2i64.to_le_bytes());
        }
        out.extend(cat(&[&len(1), &id]));
        out
    }

    /// A module value with an item of every kind.
    fn module_value() -> Vec<u8> {
        cat(&[
            &len(0x1234_5678_9ABC),
            &len(2),
            &len(42),
            &len(5),
            &lzf_string(),
            &len(4),
            &1.5f64.to_le_bytes(),
            &len(3),
            &1.5f32.to_le_bytes(),
            &len(1),
            &len(3),
            &len(0),
        ])
    }

    /// Values of every walk shape, each with the entry it must give.
    fn values() -> Vec<(Vec<u8>, Entry)> {
        let quicklist = cat(&[&len(2), &len(2), &raw(b"listpack"), &len(2), &lzf_string()]);
        // Text scores: "1.5", then +inf (254) and NaN (253) with no text.
        let zset_text = cat(&[&len(3), &raw(b"a"), &raw(b"1.5"), &raw(b"b"), &[254]]);
        let zset_text = cat(&[&zset_text, &raw(b"c"), &[253]]);
        let hash_2 = cat(&[
            &len(2),
            &raw(b"f"),
            &raw(b"v"),
            &(-1i64).to_le_bytes(),
            &raw(b"g"),
            &[0xC0, 7],
            &1_700_000_000_000i64.to_le_bytes(),
        ]);
        let zset_2 = cat(&[&len(1), &raw(b"m"), &2.5f64.to_le_bytes()]);
        let set = cat(&[&len(2), &raw(b"x"), &[0xC1, 0x39, 0x30]]);
        let hash = cat(&[&len(1), &raw(b"field"), &raw(b"value")]);
        let big_string = raw(&vec![b'z'; 20_000]);
        let rows: Vec<(u8, &[u8], Vec<u8>)> = vec![
            (TYPE_STRING, b"12345", vec![0xC1, 0x39, 0x30]),
            (TYPE_STRING, b"abcabcabcabc", lzf_string()),
            (TYPE_STRING, b"big", big_string),
            (TYPE_LIST_QUICKLIST_2, b"list", quicklist),
            (TYPE_ZSET, b"zset-text", zset_text),
            (TYPE_ZSET_2, b"zset", zset_2),
            (TYPE_SET, b"set", set),
            (TYPE_SET_INTSET, b"intset", raw(b"intset-blob")),
            (TYPE_HASH, b"hash", hash),
            (TYPE_HASH_2, b"hash-ttl", hash_2),
            (TYPE_STREAM_LISTPACKS, b"stream-1", stream_value(1)),
            (TYPE_STREAM_LISTPACKS_2, b"stream-2", stream_value(2)),
            (TYPE_STREAM_LISTPACKS_3, b"stream-3", stream_value(3)),
            (TYPE_MODULE_2, b"module", module_value()),
            (
                TYPE_LIST,
                b"old-list",
                cat(&[&len(2), &raw(b"a"), &[0xC0, 1]]),
            ),
            (
                TYPE_LIST_QUICKLIST,
                b"old-quicklist",
                cat(&[&len(1), &raw(b"ziplist")]),
            ),
            (TYPE_HASH_ZIPLIST, b"old-hash", raw(b"ziplist")),
        ];
        rows.into_iter()
            .map(|(type_byte, name, value)| {
                let stored_name = match name {
                    b"12345" => vec![0xC1, 0x39, 0x30],
                    b"abcabcabcabc" => lzf_string(),
                    _ => raw(name),
                };
                let bytes = cat(&[&[type_byte], &stored_name, &value]);
                (bytes, key(name, None, type_byte, &value))
            })
            .collect()
    }

    /// A hand-made Valkey 9 RDB: opcodes of every kind around the values, and what it holds.
    fn sample() -> (Vec<u8>, Vec<Entry>) {
        let mut rdb = b"VALKEY080".to_vec();
        let mut entries = Vec::new();
        rdb.extend(cat(&[&[OP_AUX], &raw(b"valkey-ver"), &raw(b"9.0.0")]));
        rdb.extend(cat(&[&[OP_AUX], &raw(b"repl-id"), &lzf_string()]));
        rdb.extend(cat(&[
            &[OP_MODULE_AUX],
            &len(99),
            &len(2),
            &len(1),
            &len(5),
            &raw(b"aux"),
            &len(0),
        ]));
        rdb.extend(cat(&[&[OP_FUNCTION2], &lzf_string()]));
        entries.push(Entry::Function(b"abcabcabcabc".to_vec()));
        rdb.extend(cat(&[
            &[OP_SELECTDB],
            &len(0),
            &[OP_RESIZEDB],
            &len(300),
            &len(2),
        ]));
        rdb.extend(cat(&[&[OP_SLOT_INFO], &len(16383), &len(1), &len(0)]));
        rdb.extend(cat(&[
            &[OP_SLOT_IMPORT],
            &raw(&[b'j'; 40]),
            &len(2),
            &len(0),
            &len(99),
            &len(200),
            &len(300),
        ]));
        for (i, (bytes, entry)) in values().into_iter().enumerate() {
            let entry = match (i, entry) {
                (0, Entry::Key(mut k)) => {
                    rdb.extend(cat(&[
                        &[OP_EXPIRETIME_MS],
                        &1_800_000_000_123i64.to_le_bytes(),
                    ]));
                    k.expire_at_ms = Some(1_800_000_000_123);
                    Entry::Key(k)
                }
                (3, Entry::Key(mut k)) => {
                    rdb.extend(cat(&[
                        &[OP_EXPIRETIME],
                        &1_800_000_000i32.to_le_bytes(),
                        &[OP_IDLE],
                        &len(1000),
                        &[OP_FREQ, 5],
                    ]));
                    k.expire_at_ms = Some(1_800_000_000_000);
                    Entry::Key(k)
                }
                (_, entry) => entry,
            };
            rdb.extend(bytes);
            entries.push(entry);
        }
        rdb.push(OP_EOF);
        let crc = crc64_jones(0, &rdb);
        rdb.extend_from_slice(&crc.to_le_bytes());
        entries.push(Entry::End);
        (rdb, entries)
    }

    /// Every entry the parser gives for `rdb` fed in pieces of `chunk` bytes.
    fn parse(rdb: &[u8], chunk: usize) -> Result<Vec<Entry>, DumpError> {
        let mut keys = RdbKeys::new();
        let mut entries = Vec::new();
        for piece in rdb.chunks(chunk) {
            keys.push(piece);
            while let Some(entry) = keys.next()? {
                entries.push(entry);
            }
        }
        keys.finish()?;
        Ok(entries)
    }

    #[test]
    fn crc64_is_valkeys() {
        // Valkey's crc64 test vector ("123456789") and the slicing path on a long input.
        assert_eq!(crc64_jones(0, b"123456789"), 0xE9C6_D914_C4B8_D9CA);
        let long: Vec<u8> = (0..1000u32).map(|i| (i * 7 + 3) as u8).collect();
        let bytewise = long.iter().fold(0u64, |crc, &b| {
            CRC64_TABLES[0][((crc ^ u64::from(b)) & 0xFF) as usize] ^ (crc >> 8)
        });
        assert_eq!(crc64_jones(0, &long), bytewise);
        let (head, tail) = long.split_at(333);
        assert_eq!(crc64_jones(crc64_jones(0, head), tail), bytewise);
    }

    #[test]
    fn lengths_of_every_encoding() {
        for n in [
            0,
            1,
            63,
            64,
            16383,
            16384,
            u64::from(u32::MAX),
            u64::from(u32::MAX) + 1,
            u64::MAX,
        ] {
            let bytes = len(n);
            assert_eq!(Cursor::new(&bytes, 0).length().ok(), Some(n), "{n}");
            for short in 0..bytes.len() {
                let stop = Cursor::new(&bytes[..short], 0).length();
                assert!(
                    matches!(stop, Err(Stop::Short(need)) if need > short),
                    "{n} cut at {short}"
                );
            }
        }
        assert!(matches!(
            Cursor::new(&[0x82, 0, 0, 0, 0], 7).length(),
            Err(Stop::Bad(DumpError::Malformed { offset: 7, .. }))
        ));
        assert!(matches!(
            Cursor::new(&[0xC0, 1], 0).length(),
            Err(Stop::Bad(_))
        ));
    }

    #[test]
    fn strings_decode_integers_and_lzf() {
        let cases: [(&[u8], &[u8]); 5] = [
            (&[0xC0, 0xFF], b"-1"),
            (&[0xC1, 0x39, 0x30], b"12345"),
            (&[0xC2, 0x00, 0xCA, 0x9A, 0x3B], b"1000000000"),
            (&[0x03, b'a', b'b', b'c'], b"abc"),
            (&lzf_string(), b"abcabcabcabc"),
        ];
        for (stored, text) in cases {
            assert_eq!(Cursor::new(stored, 0).string().ok().as_deref(), Some(text));
        }
        // Decompressing to another length than the one stored is refused.
        let wrong = cat(&[&[0xC3], &len(7), &len(11), &LZF_ABC]);
        assert!(matches!(Cursor::new(&wrong, 0).string(), Err(Stop::Bad(_))));
        assert!(matches!(
            Cursor::new(&[0xC4], 0).string(),
            Err(Stop::Bad(_))
        ));
    }

    #[test]
    fn a_hand_made_rdb_gives_every_key_as_its_dump_payload() {
        let (rdb, expected) = sample();
        let entries = parse(&rdb, rdb.len()).unwrap();
        assert_eq!(entries, expected);
        let mut keys = RdbKeys::new();
        keys.push(&rdb);
        while keys.next().unwrap().is_some() {}
        assert_eq!(keys.rdb_version(), Some(80));
        assert_eq!(keys.position(), rdb.len() as u64);
    }

    #[test]
    fn every_prefix_asks_for_more_and_never_fails() {
        let (rdb, expected) = sample();
        for end in 0..rdb.len() {
            let mut keys = RdbKeys::new();
            keys.push(&rdb[..end]);
            let mut entries = Vec::new();
            while let Some(entry) = keys.next().unwrap_or_else(|e| panic!("prefix {end}: {e}")) {
                entries.push(entry);
            }
            assert_eq!(entries[..], expected[..entries.len()], "prefix {end}");
            assert!(!entries.contains(&Entry::End), "prefix {end}");
            assert!(
                matches!(keys.finish(), Err(DumpError::Truncated { offset }) if offset == end as u64),
                "prefix {end}"
            );
        }
    }

    #[test]
    fn chunking_does_not_change_the_entries() {
        let (rdb, expected) = sample();
        for chunk in [1, 2, 3, 7, 64, 1000] {
            assert_eq!(parse(&rdb, chunk).unwrap(), expected, "chunks of {chunk}");
        }
    }

    #[test]
    fn a_big_value_in_small_chunks_is_walked_once() {
        // 200k members: walking from the value's start again at every chunk would take
        // minutes; walked once, it is instant.
        let members = 200_000u64;
        let mut value = len(members);
        for i in 0..members {
            value.extend(raw(format!("member-{i}").as_bytes()));
        }
        let mut rdb = b"REDIS0011".to_vec();
        rdb.extend(cat(&[&[TYPE_SET], &raw(b"big"), &value, &[OP_EOF]]));
        let crc = crc64_jones(0, &rdb);
        rdb.extend_from_slice(&crc.to_le_bytes());
        let started = std::time::Instant::now();
        let entries = parse(&rdb, 61).unwrap();
        assert!(started.elapsed() < std::time::Duration::from_secs(20));
        let Entry::Key(big) = &entries[0] else {
            panic!("{entries:?}")
        };
        assert_eq!(big.payload, payload(TYPE_SET, &value, 11));
        assert_eq!(entries.len(), 2);
    }

    #[test]
    fn an_old_rdb_without_checksum_ends_at_its_eof() {
        let mut rdb = b"REDIS0004".to_vec();
        rdb.extend(cat(&[&[TYPE_STRING], &raw(b"k"), &raw(b"v"), &[OP_EOF]]));
        let entries = parse(&rdb, 1).unwrap();
        assert_eq!(entries.len(), 2);
        let Entry::Key(k) = &entries[0] else { panic!() };
        assert_eq!(k.payload, payload(TYPE_STRING, &raw(b"v"), 4));
    }

    /// The sample with one byte changed.
    fn corrupt(at: usize, byte: u8) -> (Vec<u8>, Result<Vec<Entry>, DumpError>) {
        let (mut rdb, _) = sample();
        rdb[at] = byte;
        let result = parse(&rdb, 5);
        (rdb, result)
    }

    #[test]
    fn an_unknown_type_byte_is_named_with_its_offset() {
        let (rdb, _) = sample();
        let expiry = cat(&[&[OP_EXPIRETIME_MS], &1_800_000_000_123i64.to_le_bytes()]);
        let type_at = rdb.windows(9).position(|w| w == expiry).unwrap() + 9;
        assert_eq!(rdb[type_at], TYPE_STRING);
        for bad in [8, 23, 0x42, 0xF0] {
            let (_, result) = corrupt(type_at, bad);
            let expected = DumpError::UnknownType {
                byte: bad,
                offset: type_at as u64,
            };
            assert_eq!(result, Err(expected.clone()));
            assert!(expected.to_string().contains(&format!("{bad:#04x}")));
        }
        assert!(matches!(
            corrupt(type_at, TYPE_MODULE_PRE_GA).1,
            Err(DumpError::Unsupported { .. })
        ));
    }

    #[test]
    fn other_damage_is_refused() {
        let (rdb, _) = sample();
        let select = rdb.iter().position(|b| *b == OP_SELECTDB).unwrap();
        assert_eq!(
            corrupt(select + 1, 3).1,
            Err(DumpError::Database {
                db: 3,
                offset: select as u64
            })
        );
        let last = rdb.len() - 1;
        assert!(matches!(
            corrupt(last, rdb[last] ^ 1).1,
            Err(DumpError::Checksum { .. })
        ));
        assert!(matches!(corrupt(0, b'X').1, Err(DumpError::NotRdb(_))));
        let mut longer = rdb.clone();
        longer.push(0);
        assert_eq!(
            parse(&longer, 9),
            Err(DumpError::TrailingBytes {
                offset: rdb.len() as u64,
                count: 1
            })
        );
        // A checksum of zero: the writer had checksums off.
        let mut unchecked = rdb.clone();
        unchecked[last - 7..].fill(0);
        assert!(parse(&unchecked, 9).is_ok());
        // Once refused, always refused.
        let mut keys = RdbKeys::new();
        keys.push(b"-ERR nope");
        assert!(keys.next().is_err());
        assert!(keys.next().is_err());
        assert!(keys.finish().is_err());
    }

    #[test]
    fn an_unknown_module_item_is_refused() {
        let mut rdb = b"VALKEY080".to_vec();
        rdb.extend(cat(&[&[TYPE_MODULE_2], &raw(b"m"), &len(1), &len(9)]));
        let mut keys = RdbKeys::new();
        keys.push(&rdb);
        assert!(matches!(
            keys.next(),
            Err(DumpError::Malformed { offset: 13, .. })
        ));
    }
}
