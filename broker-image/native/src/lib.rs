//! Compiled kernels of the broker's produce path (issue 38 item 3): each is the hot loop of a
//! pure Python function, which stays the reference (and the fallback where this package is
//! not built). A kernel answers exactly what its reference answers, or `None` where it does
//! not take the input (a rare shape, a value out of its integer range): then the reference
//! decides, so refusals and their wording exist once, in Python.
//!
//! - `encode_run_records`: the record loop of `store.message_encode.encode_run`.
//! - `batch_send_one_pass`: `remoting_front.wire._batch_send_one_pass`.
//! - `scan_accepted`: the record walk of `store.message_scan.scan_records` (a slave's
//!   dispatch of every replicated transfer, recovery), up to the first record it does not
//!   accept; the Python walk goes on from there (and names why the log stops).
//!
//! Both read untrusted bytes (a client's batch, its bodies): every index is checked by the
//! slice operations, so a lying length is a refusal, never a read out of bounds.

use std::collections::HashSet;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyString, PyTuple};

const MESSAGE_MAGIC_CODE: i32 = -626843481;
const BLANK_MAGIC_CODE: i32 = -875286124;
const END_FILE_MIN_BLANK_LENGTH: i64 = 8;
/// totalSize, magic, bodyCRC, flag, bodyLength of a batch body's message.
const BATCH_PREFIX: usize = 20;
/// A record's properties length is a Java short.
const MAX_PROPERTIES_BYTES: usize = 32767;

/// Java's String.hashCode() over UTF-16 code units (`message.java_string_hash`).
fn java_string_hash(text: &str) -> i32 {
    text.encode_utf16()
        .fold(0i32, |h, unit| h.wrapping_mul(31).wrapping_add(unit as i32))
}

fn be_i32(buf: &[u8], at: usize) -> Option<i32> {
    Some(i32::from_be_bytes(buf.get(at..at + 4)?.try_into().ok()?))
}

fn be_i16(buf: &[u8], at: usize) -> Option<i16> {
    Some(i16::from_be_bytes(buf.get(at..at + 2)?.try_into().ok()?))
}

fn fits_i32(v: i64) -> bool {
    i32::try_from(v).is_ok()
}

/// One message of a run, laid out: where its record starts and what it holds.
struct Placed<'a> {
    blank_before: i64,
    pos: i64,
    total: i64,
    body: &'a [u8],
    properties: &'a [u8],
}

/// The record loop of `encode_run` after its checks of the run (topic, queue, hosts, start
/// offset). `properties` is None, or one entry per body, each None or an `encoded_type`
/// (EncodedProperties) instance. Returns (data, physical offsets, sizes, tags codes or None);
/// ("properties", i, length) or ("size", i, totalSize) for the first message `encode_run`
/// refuses; None where the reference must decide (a body that is not bytes, a properties
/// entry of another type, a tag that is not valid Unicode, a value out of its field's range).
#[pyfunction]
#[allow(clippy::too_many_arguments)]
#[pyo3(signature = (
    topic_part, queue_id, bodies, properties, encoded_type, flag, born_timestamp_ms, middle,
    sys_flag, fixed, start_offset, segment_bytes, first_queue_offset, limit
))]
fn encode_run_records<'py>(
    py: Python<'py>,
    topic_part: &[u8],
    queue_id: i64,
    bodies: &Bound<'py, PyList>,
    properties: Option<&Bound<'py, PyList>>,
    encoded_type: &Bound<'py, PyAny>,
    flag: i64,
    born_timestamp_ms: i64,
    middle: &[u8],
    sys_flag: i64,
    fixed: i64,
    start_offset: i64,
    segment_bytes: i64,
    first_queue_offset: i64,
    limit: i64,
) -> PyResult<PyObject> {
    let none = py.None();
    if !(fits_i32(queue_id) && fits_i32(flag) && fits_i32(sys_flag))
        || segment_bytes <= 0
        || start_offset < 0
    {
        return Ok(none);
    }
    if let Some(props) = properties {
        if props.len() != bodies.len() {
            return Ok(none);
        }
    }
    let count = bodies.len();
    let mut body_refs: Vec<Bound<'py, PyBytes>> = Vec::with_capacity(count);
    for item in bodies.iter() {
        match item.downcast_exact::<PyBytes>() {
            Ok(b) => body_refs.push(b.clone()),
            Err(_) => return Ok(none),
        }
    }
    // Each message's properties bytes and tags code, read in order as `_trailer` reads them.
    let mut prop_refs: Vec<Option<Bound<'py, PyBytes>>> = Vec::with_capacity(count);
    let mut tcodes: Vec<i32> = Vec::with_capacity(if properties.is_some() { count } else { 0 });
    if let Some(props) = properties {
        for item in props.iter() {
            if item.is_none() {
                prop_refs.push(None);
                tcodes.push(0);
                continue;
            }
            if !item.get_type().is(encoded_type) {
                return Ok(none);
            }
            let data = item.getattr("data")?;
            let Ok(data) = data.downcast_exact::<PyBytes>() else {
                return Ok(none);
            };
            let tags = item.getattr("tags")?;
            let tcode = if data.as_bytes().is_empty() || tags.is_none() {
                0
            } else {
                let Ok(text) = tags.downcast_exact::<PyString>() else {
                    return Ok(none);
                };
                let Ok(text) = text.to_str() else {
                    return Ok(none);
                };
                if text.is_empty() {
                    0
                } else {
                    java_string_hash(text)
                }
            };
            prop_refs.push(Some(data.clone()));
            tcodes.push(tcode);
        }
    }
    let mut placed: Vec<Placed<'_>> = Vec::with_capacity(count);
    let mut pos = start_offset;
    let mut out_len: usize = 0;
    for (i, body_ref) in body_refs.iter().enumerate() {
        let body = body_ref.as_bytes();
        let props: &[u8] = match prop_refs.get(i) {
            Some(Some(p)) => p.as_bytes(),
            _ => &[],
        };
        if props.len() > MAX_PROPERTIES_BYTES {
            return Ok((
                "properties",
                i,
                props.len(),
            )
                .into_pyobject(py)?
                .into_any()
                .unbind());
        }
        let total = fixed + body.len() as i64 + props.len() as i64;
        if total > limit {
            return Ok(("size", i, total).into_pyobject(py)?.into_any().unbind());
        }
        // What `struct.pack` would refuse in this message's record: the reference raises it.
        if !fits_i32(total) || first_queue_offset.checked_add(i as i64).is_none() {
            return Ok(none);
        }
        let space = segment_bytes - pos.rem_euclid(segment_bytes);
        let mut blank_before = 0;
        if total + END_FILE_MIN_BLANK_LENGTH > space {
            if !fits_i32(space) {
                return Ok(none);
            }
            blank_before = space;
            pos += space;
        }
        placed.push(Placed { blank_before, pos, total, body, properties: props });
        out_len += (blank_before + total) as usize;
        let Some(next) = pos.checked_add(total) else {
            return Ok(none);
        };
        pos = next;
    }
    let plain_trailer_len = topic_part.len() + 2;
    let prefix_len = 52 + middle.len();
    // The record's own lengths must add up to what `message_length` said (`fixed`).
    if fixed != (prefix_len + plain_trailer_len) as i64 {
        return Ok(none);
    }
    let data = PyBytes::new_with(py, out_len, |buf: &mut [u8]| {
        let mut at = 0usize;
        for (n, m) in placed.iter().enumerate() {
            if m.blank_before > 0 {
                buf[at..at + 4].copy_from_slice(&(m.blank_before as i32).to_be_bytes());
                buf[at + 4..at + 8].copy_from_slice(&BLANK_MAGIC_CODE.to_be_bytes());
                at += m.blank_before as usize; // the rest of the blank is zeros already
            }
            let crc = (crc32fast::hash(m.body) & 0x7FFF_FFFF) as i32;
            let mut put = |bytes: &[u8]| {
                buf[at..at + bytes.len()].copy_from_slice(bytes);
                at += bytes.len();
            };
            put(&(m.total as i32).to_be_bytes());
            put(&MESSAGE_MAGIC_CODE.to_be_bytes());
            put(&crc.to_be_bytes());
            put(&(queue_id as i32).to_be_bytes());
            put(&(flag as i32).to_be_bytes());
            put(&(first_queue_offset + n as i64).to_be_bytes());
            put(&m.pos.to_be_bytes());
            put(&(sys_flag as i32).to_be_bytes());
            put(&born_timestamp_ms.to_be_bytes());
            put(middle);
            put(&(m.body.len() as i32).to_be_bytes());
            put(m.body);
            put(topic_part);
            put(&(m.properties.len() as u16).to_be_bytes());
            put(m.properties);
        }
        Ok(())
    })?;
    let phys: Vec<i64> = placed.iter().map(|m| m.pos).collect();
    let sizes: Vec<i64> = placed.iter().map(|m| m.total).collect();
    let tcodes: PyObject = if properties.is_some() {
        PyList::new(py, tcodes)?.into_any().unbind()
    } else {
        py.None()
    };
    let result = PyTuple::new(
        py,
        [
            data.into_any().unbind(),
            PyList::new(py, phys)?.into_any().unbind(),
            PyList::new(py, sizes)?.into_any().unbind(),
            tcodes,
        ],
    )?;
    Ok(result.into_any().unbind())
}

/// One `name\x01value\x02` pair of a message's properties.
struct Pair<'a> {
    name: &'a [u8],
    /// The whole pair, separators included.
    bytes: &'a [u8],
}

/// The pairs of properties in the canonical layout (names non-empty and distinct, one name
/// separator per pair, nothing after the last pair), or None (`wire._names`).
fn canonical_pairs(raw: &[u8]) -> Option<Vec<Pair<'_>>> {
    let mut pairs: Vec<Pair<'_>> = Vec::new();
    let mut start = 0usize;
    while start < raw.len() {
        let len = raw[start..].iter().position(|&b| b == 0x02)?;
        let piece = &raw[start..start + len];
        let sep = piece.iter().position(|&b| b == 0x01)?;
        if sep == 0 || piece[sep + 1..].contains(&0x01) {
            return None;
        }
        let name = &piece[..sep];
        if pairs.iter().any(|p| p.name == name) {
            return None;
        }
        pairs.push(Pair { name, bytes: &raw[start..start + len + 1] });
        start += len + 1;
    }
    Some(pairs)
}

/// `wire._batch_send_one_pass` after its check of the request's properties: `request` is
/// their (name, `name\x01value\x02`) pairs in order. Returns (flag, bodies, properties as
/// `encoded_type(merged bytes, tags)`), or None where the reference path must decide.
#[pyfunction]
fn batch_send_one_pass<'py>(
    py: Python<'py>,
    body: &Bound<'py, PyBytes>,
    request: Vec<(Vec<u8>, Vec<u8>)>,
    max_messages: usize,
    reference_names: HashSet<String>,
    encoded_type: &Bound<'py, PyAny>,
) -> PyResult<PyObject> {
    let none = py.None();
    let b = body.as_bytes();
    let size = b.len();
    let bodies = PyList::empty(py);
    let props = PyList::empty(py);
    let mut flag: Option<i32> = None;
    let mut pos = 0usize;
    let mut merged: Vec<u8> = Vec::new();
    while pos < size {
        if bodies.len() >= max_messages || size - pos < BATCH_PREFIX {
            return Ok(none);
        }
        let (Some(total), Some(msg_flag), Some(body_len)) =
            (be_i32(b, pos), be_i32(b, pos + 12), be_i32(b, pos + 16))
        else {
            return Ok(none);
        };
        let (total, body_len) = (total as i64, body_len as i64);
        let end = pos as i64 + total;
        let start = pos as i64 + BATCH_PREFIX as i64;
        let props_start = start + body_len + 2;
        if total < BATCH_PREFIX as i64 + 2 || end > size as i64 || body_len < 0 || props_start > end
        {
            return Ok(none);
        }
        let (end, start, props_start) = (end as usize, start as usize, props_start as usize);
        if be_i16(b, props_start - 2).map(i64::from) != Some((end - props_start) as i64) {
            return Ok(none);
        }
        match flag {
            None => flag = Some(msg_flag),
            Some(f) if f != msg_flag => return Ok(none),
            _ => {}
        }
        let raw = &b[props_start..end];
        if std::str::from_utf8(raw).is_err() {
            return Ok(none);
        }
        let Some(pairs) = canonical_pairs(raw) else {
            return Ok(none);
        };
        if pairs
            .iter()
            .any(|p| std::str::from_utf8(p.name).is_ok_and(|n| reference_names.contains(n)))
        {
            return Ok(none);
        }
        // `{**request, **message}`: the request's names first, in its order (the message's
        // value where it has one), then the message's other names in its order.
        merged.clear();
        let mut tags: Option<&[u8]> = None;
        for (name, pair) in &request {
            let chosen: &[u8] = pairs
                .iter()
                .find(|p| p.name == name.as_slice())
                .map_or(pair.as_slice(), |p| p.bytes);
            merged.extend_from_slice(chosen);
            if name.as_slice() == b"TAGS" {
                tags = Some(&chosen[5..chosen.len() - 1]);
            }
        }
        for p in &pairs {
            if !request.iter().any(|(name, _)| name.as_slice() == p.name) {
                merged.extend_from_slice(p.bytes);
                if p.name == b"TAGS" {
                    tags = Some(&p.bytes[5..p.bytes.len() - 1]);
                }
            }
        }
        if merged.len() > MAX_PROPERTIES_BYTES {
            return Ok(none);
        }
        let tags_text: PyObject = match tags {
            Some(value) if !value.is_empty() => match std::str::from_utf8(value) {
                Ok(text) => PyString::new(py, text).into_any().unbind(),
                Err(_) => return Ok(none),
            },
            _ => py.None(),
        };
        bodies.append(PyBytes::new(py, &b[start..start + body_len as usize]))?;
        props.append(encoded_type.call1((PyBytes::new(py, &merged), tags_text))?)?;
        pos = end;
    }
    let Some(flag) = flag else {
        return Ok(none);
    };
    Ok((flag, bodies, props).into_pyobject(py)?.into_any().unbind())
}

/// The layout of the records `scan_accepted` walks: what `record_layout` says, handed over
/// by the Python caller so the rules' numbers exist once.
#[derive(FromPyObject)]
#[pyo3(from_item_all)]
struct RecordRules {
    /// Where the body starts from the record start, by the sysFlag's two host bits
    /// (neither, born host v6, store host v6, both).
    body_at: [i64; 4],
    born_v6_flag: i32,
    store_v6_flag: i32,
    min_record_bytes: i64,
    max_topic_bytes: i64,
}

/// Java's `MessageDecoder.string2messageProperties` read for the TAGS value only (as
/// `message.decode_properties(...).get("TAGS")`: pairs of exactly two non-empty parts,
/// the last TAGS wins), over UTF-8 text.
fn tags_value(text: &str) -> Option<&str> {
    let mut found = None;
    for item in text.split('\u{2}') {
        let mut parts = item.split('\u{1}');
        let (Some(name), Some(value), None) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        if name == "TAGS" && !value.is_empty() {
            found = Some(value);
        }
    }
    found
}

/// `scan_records`' walk from `pos` over `buf` (at commit log offset `base_offset + 0`):
/// the records it accepts, as `new_index((topic, queueId, queueOffset, physicalOffset,
/// size, tagsCode))`, up to the first it does not (a record the rules refuse, or one whose
/// topic or properties are not UTF-8, which the Python walk reads). Returns (where it
/// stopped, the records).
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn scan_accepted<'py>(
    py: Python<'py>,
    buf: &[u8],
    pos: usize,
    base_offset: i64,
    segment_bytes: i64,
    limit: i64,
    verify_crc: bool,
    rules: RecordRules,
    new_index: &Bound<'py, PyAny>,
) -> PyResult<(usize, Bound<'py, PyList>)> {
    let records = PyList::empty(py);
    let n = buf.len();
    let head_bytes = rules.body_at[0] as usize;
    let host_flags = rules.born_v6_flag | rules.store_v6_flag;
    let mut pos = pos;
    let mut topic_cache: Option<(Vec<u8>, Bound<'py, PyString>)> = None;
    if segment_bytes <= 0 {
        return Ok((pos, records));
    }
    while n.saturating_sub(pos) >= head_bytes {
        let at = |off: usize| be_i32(buf, pos + off);
        let (Some(total), Some(magic), Some(crc), Some(queue_id), Some(sys_flag)) =
            (at(0), at(4), at(8), at(12), at(36))
        else {
            break;
        };
        let read_i64 = |off: usize| -> Option<i64> {
            Some(i64::from_be_bytes(buf.get(pos + off..pos + off + 8)?.try_into().ok()?))
        };
        let (Some(queue_offset), Some(phys_field)) = (read_i64(20), read_i64(28)) else {
            break;
        };
        let total = total as i64;
        let phys = base_offset + pos as i64;
        let end = pos as i64 + total;
        let segment_end = phys - phys.rem_euclid(segment_bytes) + segment_bytes;
        if !(magic == MESSAGE_MAGIC_CODE
            && end <= n as i64
            && phys_field == phys
            && total >= rules.min_record_bytes
            && total <= limit
            && total + END_FILE_MIN_BLANK_LENGTH <= segment_end - phys)
        {
            break;
        }
        let end = end as usize;
        let bits = sys_flag & host_flags;
        let body_at = pos
            + rules.body_at[usize::from(bits & rules.born_v6_flag != 0)
                + 2 * usize::from(bits & rules.store_v6_flag != 0)] as usize;
        let Some(body_len) = be_i32(buf, body_at - 4) else {
            break;
        };
        let tl_at = body_at as i64 + body_len as i64;
        if !(body_at as i64 <= tl_at && tl_at < end as i64) {
            break;
        }
        let tl_at = tl_at as usize;
        let topic_len = buf[tl_at] as usize;
        let pl_at = tl_at + 1 + topic_len;
        if pl_at + 2 > end {
            break;
        }
        let Some(props_len) = be_i16(buf, pl_at) else {
            break;
        };
        if !(topic_len > 0
            && topic_len as i64 <= rules.max_topic_bytes
            && props_len >= 0
            && pl_at + 2 + props_len as usize == end)
        {
            break;
        }
        if verify_crc && (crc32fast::hash(&buf[body_at..tl_at]) & 0x7FFF_FFFF) as i32 != crc {
            break;
        }
        let raw_topic = &buf[tl_at + 1..pl_at];
        let topic = match &topic_cache {
            Some((raw, text)) if raw.as_slice() == raw_topic => text.clone(),
            _ => {
                let Ok(text) = std::str::from_utf8(raw_topic) else {
                    break;
                };
                let text = PyString::new(py, text);
                topic_cache = Some((raw_topic.to_vec(), text.clone()));
                text
            }
        };
        let mut tags_code = 0;
        let props = &buf[pl_at + 2..end];
        if props.windows(5).any(|w| w == b"TAGS\x01") {
            let Ok(text) = std::str::from_utf8(props) else {
                break; // `decode_properties` replaces bad bytes: the Python walk reads it
            };
            if let Some(tags) = tags_value(text) {
                tags_code = java_string_hash(tags);
            }
        }
        let fields = (topic, queue_id, queue_offset, phys, total, tags_code);
        records.append(new_index.call1((fields,))?)?;
        pos = end;
    }
    Ok((pos, records))
}

#[pymodule]
fn brokergroup_native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(encode_run_records, m)?)?;
    m.add_function(wrap_pyfunction!(batch_send_one_pass, m)?)?;
    m.add_function(wrap_pyfunction!(scan_accepted, m)?)?;
    Ok(())
}
