//! RESP2 on quorlock's own connection: commands written as the `redis`
//! crate writes them ([`write`]), in one pass, and the replies of a server
//! that speaks RESP2 (the protocol every Redis and
//! Valkey speaks until a client asks for another with `HELLO 3`), read into
//! the `redis` crate's [`Value`] as that crate reads them: `+OK` as
//! [`Value::Okay`], other simple strings as [`Value::SimpleString`], errors
//! as [`Value::ServerError`] (parsed by the `redis` crate itself, so that
//! their kinds, `NOSCRIPT` and the others, are the ones it gives), integers,
//! bulk strings, arrays, and a nil bulk string or array as [`Value::Nil`].
//!
//! Nothing a server sends can make the reader panic or allocate more than
//! the bytes it has received: a length is trusted only as far as the bytes
//! are there, and nesting deeper than [`MAX_DEPTH`] is refused (a quorlock
//! command's reply nests two deep at most).

use redis::{Arg, Cmd, Value};

/// Appends `cmd` to `out` as the `redis` crate packs it (`*` and the
/// number of arguments, then each as a bulk string), in one pass.
pub(super) fn write(cmd: &Cmd, out: &mut Vec<u8>) {
    let mut count = 0;
    for arg in cmd.args_iter() {
        match arg {
            Arg::Simple(_) => count += 1,
            // A cursor's command (none of ours), or a kind of argument
            // newer than this code: the crate packs it.
            _ => return cmd.write_packed_command(out),
        }
    }
    out.push(b'*');
    decimal(count, out);
    for arg in cmd.args_iter() {
        if let Arg::Simple(bytes) = arg {
            out.push(b'$');
            decimal(bytes.len(), out);
            out.extend_from_slice(bytes);
            out.extend_from_slice(b"\r\n");
        }
    }
}

/// Appends `number` in decimal and `\r\n`. One or two digits (every
/// count and most lengths of a quorlock command) go in as one fixed-size
/// copy, without a call to `memcpy`.
fn decimal(number: usize, out: &mut Vec<u8>) {
    let digit = |n: usize| b'0' + (n % 10) as u8;
    if number < 10 {
        return out.extend_from_slice(&[digit(number), b'\r', b'\n']);
    }
    if number < 100 {
        return out.extend_from_slice(&[digit(number / 10), digit(number), b'\r', b'\n']);
    }
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    let mut left = number;
    loop {
        at -= 1;
        digits[at] = b'0' + (left % 10) as u8;
        left /= 10;
        if left == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[at..]);
    out.extend_from_slice(b"\r\n");
}

/// How deep arrays may nest in a reply.
pub(super) const MAX_DEPTH: usize = 32;

/// A reply that is not RESP2: the connection is out of step and must close.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Malformed(pub(super) &'static str);

/// The reply that starts at `buf[at..]` and the offset just past it; `None`
/// while its bytes have not all arrived.
pub(super) fn reply(buf: &[u8], at: usize) -> Result<Option<(Value, usize)>, Malformed> {
    value(buf, at, 0)
}

fn value(buf: &[u8], at: usize, depth: usize) -> Result<Option<(Value, usize)>, Malformed> {
    let Some(&kind) = buf.get(at) else {
        return Ok(None);
    };
    let Some((body, next)) = line(buf, at + 1)? else {
        return Ok(None);
    };
    let parsed = match kind {
        b'+' if body == b"OK" => Value::Okay,
        b'+' => Value::SimpleString(String::from_utf8_lossy(body).into_owned()),
        b'-' => match redis::parse_redis_value(&buf[at..next]) {
            Ok(error @ Value::ServerError(_)) => error,
            _ => return Err(Malformed("an error reply the redis crate does not read")),
        },
        b':' => Value::Int(integer(body)?),
        b'$' => return bulk(buf, next, integer(body)?),
        b'*' => return array(buf, next, integer(body)?, depth),
        _ => return Err(Malformed("a reply of a type RESP2 does not have")),
    };
    Ok(Some((parsed, next)))
}

/// A bulk string of `len` bytes from `at`.
fn bulk(buf: &[u8], at: usize, len: i64) -> Result<Option<(Value, usize)>, Malformed> {
    if len == -1 {
        return Ok(Some((Value::Nil, at)));
    }
    let len = usize::try_from(len).map_err(|_| Malformed("a length out of range"))?;
    let Some(end) = at
        .checked_add(len)
        .filter(|end| end.checked_add(2).is_some())
    else {
        return Err(Malformed("a length out of range"));
    };
    match buf.get(end..end + 2) {
        None => Ok(None),
        Some(b"\r\n") => Ok(Some((Value::BulkString(buf[at..end].to_vec()), end + 2))),
        Some(_) => Err(Malformed("a bulk string longer than its length")),
    }
}

/// An array of `len` replies from `at`, nested `depth` deep.
fn array(
    buf: &[u8],
    at: usize,
    len: i64,
    depth: usize,
) -> Result<Option<(Value, usize)>, Malformed> {
    if len == -1 {
        return Ok(Some((Value::Nil, at)));
    }
    let len = usize::try_from(len).map_err(|_| Malformed("a length out of range"))?;
    if depth >= MAX_DEPTH {
        return Err(Malformed("arrays nested too deep"));
    }
    // Each item takes three bytes at least: no more room than the bytes
    // received could fill.
    let mut items = Vec::with_capacity(len.min((buf.len() - at) / 3));
    let mut next = at;
    for _ in 0..len {
        match value(buf, next, depth + 1)? {
            Some((item, after)) => {
                items.push(item);
                next = after;
            }
            None => return Ok(None),
        }
    }
    Ok(Some((Value::Array(items), next)))
}

/// The line from `at` to its `\r\n`, and the offset after it (`None`
/// while the line has not all arrived). RESP2 has no `\r` inside a line.
fn line(buf: &[u8], at: usize) -> Result<Option<(&[u8], usize)>, Malformed> {
    let Some(rest) = buf.get(at..) else {
        return Ok(None);
    };
    let Some(end) = rest.iter().position(|&byte| byte == b'\r') else {
        return Ok(None);
    };
    match rest.get(end + 1) {
        Some(b'\n') => Ok(Some((&rest[..end], at + end + 2))),
        Some(_) => Err(Malformed("a line with a carriage return inside")),
        None => Ok(None),
    }
}

/// A decimal integer, as a header or an integer reply writes it.
fn integer(digits: &[u8]) -> Result<i64, Malformed> {
    let (negative, digits) = match digits {
        [b'-', rest @ ..] => (true, rest),
        _ => (false, digits),
    };
    if digits.is_empty() || digits.len() > 19 {
        return Err(Malformed("not an integer"));
    }
    let mut number: i64 = 0;
    for &digit in digits {
        if !digit.is_ascii_digit() {
            return Err(Malformed("not an integer"));
        }
        number = (number.checked_mul(10))
            .and_then(|number| number.checked_add(i64::from(digit - b'0')))
            .ok_or(Malformed("an integer out of range"))?;
    }
    Ok(if negative { -number } else { number })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn whole(bytes: &[u8]) -> Value {
        match reply(bytes, 0) {
            Ok(Some((value, end))) if end == bytes.len() => value,
            other => panic!("{bytes:?}: {other:?}"),
        }
    }

    /// Commands are written byte for byte as the `redis` crate packs them.
    #[test]
    fn commands_are_written_as_the_redis_crate_packs_them() {
        let mut set = redis::cmd("SET");
        set.arg("quorlock:a")
            .arg("q0123")
            .arg("NX")
            .arg("PX")
            .arg(30_000u64);
        let mut long = redis::cmd("EVALSHA");
        long.arg("f".repeat(40))
            .arg(1)
            .arg(vec![7u8; 1000])
            .arg("")
            .arg(-12i64);
        let ping = redis::cmd("PING");
        let mut many = redis::cmd("HSET");
        for n in 0..12 {
            many.arg(n).arg(format!("value {n}"));
        }
        for cmd in [set, long, ping, many] {
            let mut out = b"before".to_vec();
            write(&cmd, &mut out);
            assert_eq!(out[6..], cmd.get_packed_command()[..]);
        }
    }

    /// Every reply reads as the `redis` crate's own parser reads it.
    #[test]
    fn replies_read_as_the_redis_crate_reads_them() {
        let cases: [&[u8]; 14] = [
            b"+OK\r\n",
            b"+QUEUED\r\n",
            b"-NOSCRIPT No matching script. Please use EVAL.\r\n",
            b"-ERR wrong number of arguments\r\n",
            b"-WRONGTYPE Operation against a key holding the wrong kind of value\r\n",
            b":0\r\n",
            b":-42\r\n",
            b":9223372036854775807\r\n",
            b"$-1\r\n",
            b"$0\r\n\r\n",
            b"$5\r\nq\r\nab\r\n",
            b"*-1\r\n",
            b"*0\r\n",
            b"*3\r\n$1\r\na\r\n*2\r\n:1\r\n$-1\r\n-ERR x\r\n",
        ];
        for bytes in cases {
            let theirs = redis::parse_redis_value(bytes).expect("the redis crate reads it");
            assert_eq!(whole(bytes), theirs, "{}", String::from_utf8_lossy(bytes));
        }
    }

    /// A reply cut anywhere is not read until its last byte is there, and
    /// a reply followed by the next ends where the next begins.
    #[test]
    fn a_reply_waits_for_its_last_byte() {
        let bytes = b"*2\r\n$3\r\nabc\r\n*1\r\n:7\r\n+OK\r\n";
        let first = bytes.len() - 5;
        for cut in 0..first {
            assert_eq!(reply(&bytes[..cut], 0), Ok(None), "cut at {cut}");
        }
        let (_, end) = reply(bytes, 0).ok().flatten().expect("read");
        assert_eq!(end, first);
        assert_eq!(reply(bytes, end), Ok(Some((Value::Okay, bytes.len()))));
    }

    /// What is not RESP2 is refused, not read, and nothing panics or
    /// allocates what a length claims before the bytes are there.
    #[test]
    fn malformed_replies_are_refused() {
        let refused: [&[u8]; 8] = [
            b"?x\r\n",
            b":12a\r\n",
            b":\r\n",
            b"$-2\r\n",
            b"*-5\r\n",
            b"$2\r\nabc\r\n",
            b":99999999999999999999\r\n",
            b"%1\r\n",
        ];
        for bytes in refused {
            assert!(
                reply(bytes, 0).is_err(),
                "{}",
                String::from_utf8_lossy(bytes)
            );
        }
        // A huge claimed length waits for its bytes.
        assert_eq!(reply(b"*2147483647\r\n:1\r\n", 0), Ok(None));
        assert_eq!(reply(b"$9223372036854775807\r\n", 0), Ok(None));
        let deep = "*1\r\n".repeat(MAX_DEPTH + 1) + ":1\r\n";
        assert!(reply(deep.as_bytes(), 0).is_err());
        let deep_enough = "*1\r\n".repeat(MAX_DEPTH) + ":1\r\n";
        assert!(matches!(reply(deep_enough.as_bytes(), 0), Ok(Some(_))));
    }
}
