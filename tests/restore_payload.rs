//! `backup::dump` against real `valkey-server` processes (9.0.0 and 9.1.2): a standalone
//! server holds keys of every type and encoding (and a function library), `SAVE`s, and its
//! `dump.rdb`, fed to the parser in small odd-sized chunks, must give
//!
//! - exactly the keys `KEYS *` lists, each with the payload `DUMP` returns byte for byte and
//!   the expiry `PEXPIRETIME` reports;
//! - the library's code, as `FUNCTION LIST WITHCODE` shows it.
//!
//! Then a fresh server gets every key by `RESTORE ... REPLACE ABSTTL` and the library by
//! `FUNCTION LOAD REPLACE`, as a restore Job does, and must hold the same data: the same
//! `DUMP` where the encoding iterates in a fixed order, the same members, fields, scores and
//! field expiries where it is a hash table (whose order depends on each process's hash seed).
//!
//! Binaries: `VALKEY_SERVER_9_0` / `VALKEY_SERVER_9_1`, else the cache filled by
//! `e2e/tools/install.sh`.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use valkey_operator::backup::dump::{DumpedKey, Entry, RdbKeys};
use valkey_operator::driver::testing::ValkeyBuild;

/// A Valkey reply (RESP2).
#[derive(Clone, Debug, PartialEq)]
enum Reply {
    Status(String),
    Error(String),
    Int(i64),
    Bulk(Option<Vec<u8>>),
    Array(Option<Vec<Reply>>),
}

impl Reply {
    fn bytes(&self) -> Vec<u8> {
        match self {
            Reply::Bulk(Some(b)) => b.clone(),
            Reply::Status(s) => s.clone().into_bytes(),
            other => panic!("expected a string, got {other:?}"),
        }
    }

    fn int(&self) -> i64 {
        match self {
            Reply::Int(n) => *n,
            other => panic!("expected an integer, got {other:?}"),
        }
    }

    fn items(&self) -> Vec<Reply> {
        match self {
            Reply::Array(Some(items)) => items.clone(),
            other => panic!("expected an array, got {other:?}"),
        }
    }
}

/// A blocking RESP2 connection: enough for test commands with binary arguments.
struct Connection {
    reader: BufReader<TcpStream>,
}

impl Connection {
    fn open(port: u16) -> std::io::Result<Self> {
        let stream = TcpStream::connect(("127.0.0.1", port))?;
        stream.set_read_timeout(Some(Duration::from_secs(30)))?;
        Ok(Connection {
            reader: BufReader::new(stream),
        })
    }

    fn call_raw(&mut self, args: &[&[u8]]) -> Reply {
        let mut request = format!("*{}\r\n", args.len()).into_bytes();
        for arg in args {
            request.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
            request.extend_from_slice(arg);
            request.extend_from_slice(b"\r\n");
        }
        self.reader.get_mut().write_all(&request).expect("send");
        self.read_reply()
    }

    /// A command that must succeed.
    fn call(&mut self, args: &[&[u8]]) -> Reply {
        match self.call_raw(args) {
            Reply::Error(e) => panic!("{:?}: {e}", String::from_utf8_lossy(args[0])),
            reply => reply,
        }
    }

    fn cmd(&mut self, words: &[&str]) -> Reply {
        let args: Vec<&[u8]> = words.iter().map(|w| w.as_bytes()).collect();
        self.call(&args)
    }

    fn line(&mut self) -> String {
        let mut line = String::new();
        self.reader.read_line(&mut line).expect("read a reply");
        assert!(line.ends_with("\r\n"), "connection closed: {line:?}");
        line.truncate(line.len() - 2);
        line
    }

    fn read_reply(&mut self) -> Reply {
        let line = self.line();
        let (kind, rest) = line.split_at(1);
        let number = || rest.parse::<i64>().expect("a number");
        match kind {
            "+" => Reply::Status(rest.to_string()),
            "-" => Reply::Error(rest.to_string()),
            ":" => Reply::Int(number()),
            "$" if number() < 0 => Reply::Bulk(None),
            "$" => {
                let mut body = vec![0; number() as usize + 2];
                std::io::Read::read_exact(&mut self.reader, &mut body).expect("bulk");
                body.truncate(body.len() - 2);
                Reply::Bulk(Some(body))
            }
            "*" if number() < 0 => Reply::Array(None),
            "*" => Reply::Array(Some((0..number()).map(|_| self.read_reply()).collect())),
            _ => panic!("unexpected reply line {line:?}"),
        }
    }
}

/// A standalone `valkey-server` in its own directory, killed and removed on drop.
struct Server {
    child: Child,
    port: u16,
    dir: PathBuf,
}

impl Server {
    fn start(build: ValkeyBuild, name: &str, extra: &[&str]) -> Server {
        let binary = build.binary().unwrap_or_else(|e| panic!("{e}"));
        let port = free_port();
        let dir = std::env::temp_dir().join(format!(
            "vk-restore-payload-{}-{}-{name}",
            std::process::id(),
            build.version()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create the server's directory");
        let log = std::fs::File::create(dir.join("server.log")).expect("log file");
        let port_text = port.to_string();
        let dir_text = dir.to_string_lossy().into_owned();
        let mut args = vec![
            "--port",
            &port_text,
            "--bind",
            "127.0.0.1",
            "--dir",
            &dir_text,
            "--dbfilename",
            "dump.rdb",
            "--save",
            "",
            "--appendonly",
            "no",
            "--rdbcompression",
            "yes",
            "--rdbchecksum",
            "yes",
        ];
        args.extend_from_slice(extra);
        let child = Command::new(&binary)
            .args(&args)
            .stdout(Stdio::from(log.try_clone().expect("log file")))
            .stderr(Stdio::from(log))
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", binary.display()));
        let mut server = Server { child, port, dir };
        server.wait_ready();
        server
    }

    fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(mut connection) = Connection::open(self.port)
                && connection.call_raw(&[b"PING"]) == Reply::Status("PONG".into())
            {
                return;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("valkey-server exited ({status}):\n{}", self.log());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("valkey-server did not answer within 20s:\n{}", self.log());
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default()
    }

    fn connect(&self) -> Connection {
        Connection::open(self.port).expect("connect")
    }

    fn rdb_path(&self) -> PathBuf {
        self.dir.join("dump.rdb")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A port the OS just handed out (ephemeral range: away from the driver tests' ports).
fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("address").port()
}

/// Deterministic bytes that do not compress.
fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut state = seed | 1;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect()
}

const LIBRARY: &str = "#!lua name=restorelib\n\
    server.register_function('echo_first', function(keys, args) return args[1] end)\n\
    server.register_function('count_keys', function(keys, args) return #keys end)\n";

const HOUR_MS: i64 = 3_600_000;

/// `RPUSH`/`SADD`/`ZADD`/`HSET`-style command with many arguments at once.
fn bulk(connection: &mut Connection, head: &[&str], items: &[String]) {
    let mut args: Vec<&[u8]> = head.iter().map(|w| w.as_bytes()).collect();
    args.extend(items.iter().map(|i| i.as_bytes()));
    connection.call(&args);
}

fn write_strings(c: &mut Connection) {
    c.cmd(&["SET", "str:small", "hello"]);
    c.cmd(&["SET", "str:int8", "-7"]);
    c.cmd(&["SET", "str:int16", "12345"]);
    c.cmd(&["SET", "str:int32", "2000000000"]);
    c.cmd(&["SET", "str:int64", "9000000000000000"]);
    c.cmd(&["SET", "str:compressible", &"abc".repeat(5000)]);
    c.call(&[b"SET", b"str:noise", &noise(200_000, 1)]);
    let every_byte: Vec<u8> = (0..=255).collect();
    c.call(&[b"SET", b"str:binary\x00\xff", &every_byte]);
    // Keys stored as integers, and a long key stored LZF-compressed.
    c.cmd(&["SET", "12345", "integer key"]);
    c.cmd(&["SET", "-100", "negative integer key"]);
    c.cmd(&["SET", &format!("key:{}", "x".repeat(200)), "compressed key"]);
    c.cmd(&["PFADD", "hll", "a", "b", "c"]);
    c.cmd(&["SETRANGE", "str:bitmap", "1000", "x"]);
}

fn write_lists(c: &mut Connection) {
    c.cmd(&["RPUSH", "list:small", "a", "b", "1"]);
    let items: Vec<String> = (0..5000).map(|i| format!("item-{i}")).collect();
    bulk(c, &["RPUSH", "list:big"], &items);
    // An element past the packed node size: a plain quicklist node.
    c.cmd(&["RPUSH", "list:plain", "small", &"p".repeat(10_000), "after"]);
}

fn write_sets(c: &mut Connection) {
    c.cmd(&["SADD", "set:intset", "1", "2", "-3", "70000"]);
    c.cmd(&["SADD", "set:listpack", "a", "b", "c"]);
    let members: Vec<String> = (0..1000).map(|i| format!("member-{i}")).collect();
    bulk(c, &["SADD", "set:hashtable"], &members);
    let numbers: Vec<String> = (0..400).map(|i| (i * 3).to_string()).collect();
    bulk(c, &["SADD", "set:intset-big"], &numbers);
}

fn write_zsets(c: &mut Connection) {
    c.cmd(&["ZADD", "zset:small", "1", "a", "2.5", "b", "-inf", "c"]);
    let mut items = Vec::new();
    for i in 0..500 {
        items.push(format!("{}", f64::from(i) / 7.0));
        items.push(format!("z-{i}"));
    }
    items.extend(["+inf", "top", "-inf", "bottom"].map(String::from));
    bulk(c, &["ZADD", "zset:big"], &items);
    c.cmd(&["GEOADD", "geo", "13.361389", "38.115556", "Palermo"]);
}

fn write_hashes(c: &mut Connection) {
    c.cmd(&["HSET", "hash:small", "f1", "v1", "f2", "2"]);
    // Past Valkey 9's 512 fields of a listpack hash.
    let mut items = Vec::new();
    for i in 0..1000 {
        items.push(format!("field-{i}"));
        items.push(format!("value-{i}"));
    }
    bulk(c, &["HSET", "hash:big"], &items);
    // Field expiries (Valkey 9): a small hash and a big one, some fields persistent.
    c.cmd(&["HSET", "hash:ttl-small", "keep", "1", "expire", "2"]);
    c.cmd(&["HEXPIRE", "hash:ttl-small", "3600", "FIELDS", "1", "expire"]);
    bulk(c, &["HSET", "hash:ttl-big"], &items);
    c.cmd(&[
        "HPEXPIRE",
        "hash:ttl-big",
        "7200000",
        "FIELDS",
        "2",
        "field-1",
        "field-2",
    ]);
}

fn write_streams(c: &mut Connection) {
    for i in 0..10 {
        c.cmd(&["XADD", "stream:plain", "*", "n", &i.to_string()]);
    }
    // 300 entries (several radix tree nodes), a deleted entry, two groups, pending entries,
    // consumers with and without any.
    for i in 1..=300 {
        c.cmd(&[
            "XADD",
            "stream:groups",
            &format!("{i}-1"),
            "n",
            &i.to_string(),
            "pad",
            "x",
        ]);
    }
    c.cmd(&["XDEL", "stream:groups", "150-1"]);
    c.cmd(&["XGROUP", "CREATE", "stream:groups", "g1", "0"]);
    let read = [
        "XREADGROUP",
        "GROUP",
        "g1",
        "alice",
        "COUNT",
        "5",
        "STREAMS",
        "stream:groups",
        ">",
    ];
    c.cmd(&read);
    c.cmd(&[
        "XREADGROUP",
        "GROUP",
        "g1",
        "bob",
        "COUNT",
        "3",
        "STREAMS",
        "stream:groups",
        ">",
    ]);
    c.cmd(&["XACK", "stream:groups", "g1", "2-1"]);
    c.cmd(&["XGROUP", "CREATE", "stream:groups", "g2", "$"]);
    c.cmd(&["XGROUP", "CREATECONSUMER", "stream:groups", "g2", "carol"]);
    c.cmd(&["XADD", "stream:empty-after-trim", "1-1", "a", "b"]);
    c.cmd(&["XTRIM", "stream:empty-after-trim", "MAXLEN", "0"]);
}

fn write_expiries(c: &mut Connection) {
    c.cmd(&["SET", "ttl:string", "v", "PX", &HOUR_MS.to_string()]);
    c.cmd(&["RPUSH", "ttl:list", "a"]);
    c.cmd(&["EXPIRE", "ttl:list", "7200"]);
    c.cmd(&["HSET", "ttl:hash", "f", "v"]);
    c.cmd(&["PEXPIREAT", "ttl:hash", "4102444800123"]);
}

/// Keys of every type and encoding, and a library; `SAVE`d.
fn populate(c: &mut Connection) {
    write_strings(c);
    write_lists(c);
    write_sets(c);
    write_zsets(c);
    write_hashes(c);
    write_streams(c);
    write_expiries(c);
    c.cmd(&["FUNCTION", "LOAD", LIBRARY]);
    c.cmd(&["SAVE"]);
}

/// The RDB fed to the parser in small chunks of changing odd sizes.
fn parse_in_chunks(rdb: &[u8]) -> (Vec<DumpedKey>, Vec<Vec<u8>>) {
    const SIZES: [usize; 7] = [1, 3, 7, 61, 509, 4093, 65_537];
    let mut parser = RdbKeys::new();
    let (mut keys, mut functions, mut ended) = (Vec::new(), Vec::new(), false);
    let mut at = 0;
    for size in SIZES.iter().cycle() {
        if at == rdb.len() {
            break;
        }
        let end = (at + size).min(rdb.len());
        parser.push(&rdb[at..end]);
        at = end;
        while let Some(entry) = parser.next().expect("parse the RDB") {
            assert!(!ended, "an entry after End: {entry:?}");
            match entry {
                Entry::Key(key) => keys.push(key),
                Entry::Function(code) => functions.push(code),
                Entry::End => ended = true,
            }
        }
    }
    parser.finish().expect("the RDB ends after its checksum");
    assert!(ended, "no End entry");
    (keys, functions)
}

/// `FUNCTION LIST WITHCODE`: each library's code.
fn library_codes(c: &mut Connection) -> Vec<Vec<u8>> {
    let libraries = c.cmd(&["FUNCTION", "LIST", "WITHCODE"]).items();
    libraries
        .iter()
        .map(|library| {
            let fields = library.items();
            let pair = fields
                .chunks(2)
                .find(|pair| pair[0] == Reply::Bulk(Some(b"library_code".to_vec())))
                .expect("library_code");
            pair[1].bytes()
        })
        .collect()
}

fn all_keys(c: &mut Connection) -> BTreeSet<Vec<u8>> {
    c.cmd(&["KEYS", "*"])
        .items()
        .iter()
        .map(Reply::bytes)
        .collect()
}

/// Every key of the snapshot is what the server's own `DUMP` and `PEXPIRETIME` say.
fn assert_payloads_are_dumps(c: &mut Connection, keys: &[DumpedKey]) {
    let listed = all_keys(c);
    let parsed: BTreeSet<Vec<u8>> = keys.iter().map(|k| k.key.clone()).collect();
    assert_eq!(parsed.len(), keys.len(), "a key twice");
    assert_eq!(parsed, listed, "keys of the RDB vs KEYS *");
    for key in keys {
        let name = String::from_utf8_lossy(&key.key);
        let dump = c.call(&[b"DUMP", &key.key]).bytes();
        assert!(dump == key.payload, "payload of {name:?} differs from DUMP");
        let expiry = c.call(&[b"PEXPIRETIME", &key.key]).int();
        assert_eq!(
            key.expire_at_ms,
            (expiry != -1).then_some(expiry),
            "expiry of {name:?}"
        );
    }
}

/// `RESTORE` and `FUNCTION LOAD` as a restore Job replays a backup.
fn replay(c: &mut Connection, keys: &[DumpedKey], functions: &[Vec<u8>]) {
    for code in functions {
        c.call(&[b"FUNCTION", b"LOAD", b"REPLACE", code]);
    }
    for key in keys {
        let ttl = key.expire_at_ms.unwrap_or(0).to_string();
        let args: [&[u8]; 6] = [
            b"RESTORE",
            &key.key,
            ttl.as_bytes(),
            &key.payload,
            b"REPLACE",
            b"ABSTTL",
        ];
        assert_eq!(c.call(&args), Reply::Status("OK".into()));
    }
}

/// The data of a key whose encoding is a hash table (iteration order differs per process),
/// as sorted members, fields with values and field expiries.
fn unordered_content(c: &mut Connection, key: &[u8]) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let kind = c.call(&[b"TYPE", key]).bytes();
    let mut content = BTreeMap::new();
    if kind == b"set" {
        for member in c.call(&[b"SMEMBERS", key]).items() {
            content.insert(member.bytes(), Vec::new());
        }
        return content;
    }
    assert_eq!(kind, b"hash", "{:?}", String::from_utf8_lossy(key));
    let pairs = c.call(&[b"HGETALL", key]).items();
    for pair in pairs.chunks(2) {
        let field = pair[0].bytes();
        let expiry = c
            .call(&[b"HPEXPIRETIME", key, b"FIELDS", b"1", &field])
            .items()[0]
            .int();
        let mut value = pair[1].bytes();
        value.extend_from_slice(format!(" expires {expiry}").as_bytes());
        content.insert(field, value);
    }
    content
}

/// `OBJECT ENCODING`, a string's `embstr` counted as `raw` (whether a string is embedded in
/// its object depends on how it was created, not on what it holds).
fn encoding(c: &mut Connection, key: &[u8]) -> Vec<u8> {
    match c.call(&[b"OBJECT", b"ENCODING", key]).bytes() {
        embedded if embedded == b"embstr" => b"raw".to_vec(),
        other => other,
    }
}

/// The fresh server holds what the first one did.
fn assert_same_data(original: &mut Connection, restored: &mut Connection) {
    let keys = all_keys(original);
    assert_eq!(keys, all_keys(restored));
    for key in &keys {
        let name = String::from_utf8_lossy(key);
        let encoding = encoding(original, key);
        assert_eq!(encoding, self::encoding(restored, key), "{name}");
        let expiry = original.call(&[b"PEXPIRETIME", key]).int();
        assert_eq!(
            expiry,
            restored.call(&[b"PEXPIRETIME", key]).int(),
            "{name}"
        );
        if encoding == b"hashtable" {
            let content = unordered_content(original, key);
            assert_eq!(content, unordered_content(restored, key), "{name}");
        } else {
            let dump = original.call(&[b"DUMP", key]).bytes();
            assert!(
                dump == restored.call(&[b"DUMP", key]).bytes(),
                "DUMP of {name} after RESTORE"
            );
        }
    }
    assert_eq!(library_codes(original), library_codes(restored));
    let call = ["FCALL", "echo_first", "0", "restored"];
    assert_eq!(restored.cmd(&call).bytes(), b"restored");
}

fn read_rdb(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

fn snapshot_replays_as_dump_payloads(build: ValkeyBuild, eviction: &str) {
    // An eviction policy makes SAVE write an IDLE (LRU) or FREQ (LFU) opcode before each
    // key; a small list node size and compression depth make LZF-compressed quicklist nodes.
    let settings = [
        "--maxmemory-policy",
        eviction,
        "--list-max-listpack-size",
        "64",
    ];
    let settings = [&settings[..], &["--list-compress-depth", "1"]].concat();
    let source = Server::start(build, "source", &settings);
    let mut original = source.connect();
    populate(&mut original);
    let rdb = read_rdb(&source.rdb_path());
    assert!(rdb.starts_with(b"VALKEY"), "{:?}", &rdb[..9]);

    let (keys, functions) = parse_in_chunks(&rdb);
    assert!(keys.len() >= 30, "{} keys", keys.len());
    // Every type byte Valkey 9 writes: string; set (hash table, intset, listpack); hash
    // (hash table, with field expiries, listpack); sorted set (skiplist, listpack);
    // quicklist 2; stream listpacks 3.
    let types: BTreeSet<u8> = keys.iter().map(|k| k.payload[0]).collect();
    assert_eq!(
        types,
        BTreeSet::from([0, 2, 4, 5, 11, 16, 17, 18, 20, 21, 22])
    );
    assert_payloads_are_dumps(&mut original, &keys);
    assert_eq!(functions, library_codes(&mut original));
    assert_eq!(functions, [LIBRARY.as_bytes().to_vec()]);

    // The same settings: a list's nodes are sized and compressed by the server that holds it.
    let target = Server::start(build, "target", &settings);
    let mut restored = target.connect();
    replay(&mut restored, &keys, &functions);
    assert_same_data(&mut original, &mut restored);
}

#[test]
fn valkey_9_0_snapshot_keys_are_its_dump_payloads() {
    snapshot_replays_as_dump_payloads(ValkeyBuild::V9_0, "allkeys-lru");
}

#[test]
fn valkey_9_1_snapshot_keys_are_its_dump_payloads() {
    snapshot_replays_as_dump_payloads(ValkeyBuild::V9_1, "allkeys-lfu");
}
