//! Byte-string encodings for the bulky fields of a projection checkpoint, used with
//! `#[serde(with = "…")]`: each field is one byte string instead of one encoded number per
//! element, so reading a MessagePack checkpoint borrows its bytes and decodes them in a tight
//! loop instead of parsing ~10⁵ numbers. Each also reads back from JSON (where a byte string is
//! an array of numbers), so the folds stay serializable as JSON too.

use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::Serializer;
use std::collections::BTreeSet;
use std::fmt;

/// Hands the bytes of a byte string to `decode`: borrowed where the format has them in place
/// (MessagePack read from a slice), collected from a sequence of byte values (JSON).
fn decode_bytes<'de, D: Deserializer<'de>, T>(
    d: D,
    decode: impl FnOnce(&[u8]) -> Result<T, &'static str>,
) -> Result<T, D::Error> {
    struct BytesVisitor<F>(F);

    impl<'de, T, F: FnOnce(&[u8]) -> Result<T, &'static str>> Visitor<'de> for BytesVisitor<F> {
        type Value = T;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a byte string")
        }

        fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<T, E> {
            (self.0)(v).map_err(E::custom)
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<T, A::Error> {
            let mut bytes = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1 << 20));
            while let Some(b) = seq.next_element::<u8>()? {
                bytes.push(b);
            }
            (self.0)(&bytes).map_err(de::Error::custom)
        }
    }

    d.deserialize_bytes(BytesVisitor(decode))
}

/// `Vec<u64>` as its words, little-endian, 8 bytes each.
pub mod words {
    use super::*;

    /// Writes the words as one byte string.
    pub fn serialize<S: Serializer>(words: &[u64], s: S) -> Result<S::Ok, S::Error> {
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        s.serialize_bytes(&bytes)
    }

    /// Reads the words back.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u64>, D::Error> {
        decode_bytes(d, |bytes| {
            if bytes.len() % 8 != 0 {
                return Err("words: not a multiple of 8 bytes");
            }
            Ok(bytes
                .chunks_exact(8)
                .map(|c| {
                    let mut w = [0u8; 8];
                    w.copy_from_slice(c);
                    u64::from_le_bytes(w)
                })
                .collect())
        })
    }
}

/// `BTreeSet<u128>` as its members in order, big-endian, 16 bytes each.
pub mod digests {
    use super::*;

    /// Writes the members as one byte string.
    pub fn serialize<S: Serializer>(set: &BTreeSet<u128>, s: S) -> Result<S::Ok, S::Error> {
        let bytes: Vec<u8> = set.iter().flat_map(|d| d.to_be_bytes()).collect();
        s.serialize_bytes(&bytes)
    }

    /// Reads the members back (they come in order, so the set is built in one pass).
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeSet<u128>, D::Error> {
        decode_bytes(d, |bytes| {
            if bytes.len() % 16 != 0 {
                return Err("digests: not a multiple of 16 bytes");
            }
            Ok(bytes
                .chunks_exact(16)
                .map(|c| {
                    let mut d = [0u8; 16];
                    d.copy_from_slice(c);
                    u128::from_be_bytes(d)
                })
                .collect())
        })
    }
}

/// `Vec<u32>` as unsigned LEB128 varints: one byte per element below 128.
pub mod varints {
    use super::*;

    /// Writes the numbers as one byte string.
    pub fn serialize<S: Serializer>(seq: &[u32], s: S) -> Result<S::Ok, S::Error> {
        let mut bytes = Vec::with_capacity(seq.len());
        for &n in seq {
            let mut n = n;
            while n >= 0x80 {
                bytes.push((n as u8 & 0x7f) | 0x80);
                n >>= 7;
            }
            bytes.push(n as u8);
        }
        s.serialize_bytes(&bytes)
    }

    /// Reads the numbers back; a truncated varint or one beyond 32 bits is an error.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u32>, D::Error> {
        decode_bytes(d, |bytes| {
            if bytes.iter().all(|&b| b < 0x80) {
                // Every number below 128 (fewer than 129 distinct intents): a byte each.
                return Ok(bytes.iter().map(|&b| u32::from(b)).collect());
            }
            let mut seq = Vec::with_capacity(bytes.len());
            let (mut n, mut shift) = (0u32, 0u32);
            for &b in bytes {
                let bits = u32::from(b & 0x7f);
                if shift > 28 || (shift == 28 && bits > 0xf) {
                    return Err("varints: a number beyond 32 bits");
                }
                n |= bits << shift;
                if b & 0x80 == 0 {
                    seq.push(n);
                    (n, shift) = (0, 0);
                } else {
                    shift += 7;
                }
            }
            if shift != 0 {
                return Err("varints: truncated");
            }
            Ok(seq)
        })
    }
}

/// A strictly ascending `Vec<u32>` as its members, big-endian, 4 bytes each; members out of
/// order or repeated are an error (the reader searches them by binary search).
pub mod sorted_u32s {
    use super::*;

    /// Writes the members as one byte string.
    pub fn serialize<S: Serializer>(sorted: &[u32], s: S) -> Result<S::Ok, S::Error> {
        let bytes: Vec<u8> = sorted.iter().flat_map(|n| n.to_be_bytes()).collect();
        s.serialize_bytes(&bytes)
    }

    /// Reads the members back.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u32>, D::Error> {
        decode_bytes(d, |bytes| {
            if bytes.len() % 4 != 0 {
                return Err("sorted u32s: not a multiple of 4 bytes");
            }
            let v: Vec<u32> = bytes
                .chunks_exact(4)
                .map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]))
                .collect();
            if v.windows(2).any(|w| w[0] >= w[1]) {
                return Err("sorted u32s: not strictly ascending");
            }
            Ok(v)
        })
    }
}

#[cfg(test)]
mod tests {
    use serde::{Deserialize, Serialize};
    use std::collections::BTreeSet;

    #[derive(Debug, Default, PartialEq, Serialize, Deserialize)]
    struct Packed {
        #[serde(with = "super::words")]
        words: Vec<u64>,
        #[serde(with = "super::digests")]
        digests: BTreeSet<u128>,
        #[serde(with = "super::varints")]
        varints: Vec<u32>,
        #[serde(with = "super::sorted_u32s")]
        sorted: Vec<u32>,
    }

    fn sample() -> Packed {
        Packed {
            words: vec![0, 1, u64::MAX, 1 << 63],
            digests: BTreeSet::from([0, 1, u128::MAX, 1 << 100]),
            varints: vec![0, 1, 127, 128, 300, 16_383, 16_384, 1 << 21, u32::MAX],
            sorted: vec![0, 7, 1 << 31, u32::MAX],
        }
    }

    #[test]
    fn round_trips_through_messagepack_and_json() {
        let p = sample();
        let mp = rmp_serde::to_vec_named(&p).unwrap();
        assert_eq!(rmp_serde::from_slice::<Packed>(&mp).unwrap(), p);
        let js = serde_json::to_string(&p).unwrap();
        assert_eq!(serde_json::from_str::<Packed>(&js).unwrap(), p);
        let empty = Packed::default();
        let mp = rmp_serde::to_vec_named(&empty).unwrap();
        assert_eq!(rmp_serde::from_slice::<Packed>(&mp).unwrap(), empty);
    }

    #[test]
    fn small_varints_take_a_byte_each() {
        let p = Packed {
            varints: (0..128).chain(0..128).collect(),
            ..Packed::default()
        };
        let v = serde_json::to_value(&p).unwrap();
        assert_eq!(v["varints"].as_array().unwrap().len(), 256);
        assert_eq!(serde_json::from_value::<Packed>(v).unwrap(), p);
    }

    #[test]
    fn malformed_bytes_are_errors() {
        let read = |words: &str, digests: &str, varints: &str| {
            serde_json::from_str::<Packed>(&format!(
                r#"{{"words":{words},"digests":{digests},"varints":{varints},"sorted":[]}}"#
            ))
        };
        let sorted = |bytes: &str| {
            serde_json::from_str::<Packed>(&format!(
                r#"{{"words":[],"digests":[],"varints":[],"sorted":{bytes}}}"#
            ))
        };
        assert_eq!(sorted("[0,0,0,1,0,0,1,0]").unwrap().sorted, [1, 256]);
        assert!(sorted("[0,0,1]").is_err(), "a partial member");
        assert!(sorted("[0,0,0,2,0,0,0,1]").is_err(), "out of order");
        assert!(sorted("[0,0,0,1,0,0,0,1]").is_err(), "repeated");
        assert!(read("[]", "[]", "[]").is_ok());
        assert_eq!(
            read("[1,0,0,0,0,0,0,0]", "[]", "[255,255,255,255,15]")
                .unwrap()
                .varints,
            [u32::MAX]
        );
        assert_eq!(
            read("[]", "[]", "[0,127,128,1]").unwrap().varints,
            [0, 127, 128]
        );
        assert!(read("[1,2,3]", "[]", "[]").is_err(), "a partial word");
        assert!(read("[]", "[1]", "[]").is_err(), "a partial digest");
        assert!(read("[]", "[]", "[128]").is_err(), "a truncated varint");
        assert!(
            read("[]", "[]", "[255,255,255,255,16]").is_err(),
            "beyond 32 bits"
        );
        assert!(read("[]", "[]", "[256]").is_err(), "not a byte");
    }
}
