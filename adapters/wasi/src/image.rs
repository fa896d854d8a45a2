//! A suspended run's image: the 4 KiB pages of linear memory that differ
//! from the guest's boot image (each XOR the boot page, so that what did
//! not change within a page is zeros and compresses to nothing), the
//! memory's size, and the fuel burned so far. While a host call is
//! pending the wasm stack is empty: the shadow stack pointer is back at
//! its base, and the whole JavaScript heap, the guest's allocator and its
//! statics are in linear memory.

/// Bytes per page compared.
const PAGE: usize = 4096;

const MAGIC: &[u8; 4] = b"HWI1";

/// What [`decode`] reads back (its pages borrowed from the bytes).
#[derive(Debug)]
pub(crate) struct Image<'a> {
    /// SHA-256 of the guest file that made it, hex.
    pub guest: String,
    /// The linear memory's size.
    pub memory_bytes: usize,
    pub fuel_used: u64,
    /// Page index and the page XOR the boot image's.
    pages: Vec<(u32, &'a [u8])>,
}

/// The image of `memory` against `boot`.
pub(crate) fn encode(guest: &str, boot: &[u8], memory: &[u8], fuel_used: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(64 * 1024);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&(guest.len() as u32).to_le_bytes());
    out.extend_from_slice(guest.as_bytes());
    out.extend_from_slice(&(memory.len() as u64).to_le_bytes());
    out.extend_from_slice(&fuel_used.to_le_bytes());
    let count_at = out.len();
    out.extend_from_slice(&0u32.to_le_bytes());
    let mut count = 0u32;
    for (i, page) in memory.chunks(PAGE).enumerate() {
        let start = i * PAGE;
        let base = (start < boot.len()).then(|| &boot[start..(start + page.len()).min(boot.len())]);
        let same = match base {
            Some(b) => b.len() == page.len() && b == page,
            None => page.iter().all(|&x| x == 0),
        };
        if same {
            continue;
        }
        count += 1;
        out.extend_from_slice(&(i as u32).to_le_bytes());
        let base = base.unwrap_or(&[]);
        out.extend(
            page.iter()
                .enumerate()
                .map(|(j, &x)| x ^ base.get(j).copied().unwrap_or(0)),
        );
        out.extend(std::iter::repeat_n(0, PAGE - page.len()));
    }
    out[count_at..count_at + 4].copy_from_slice(&count.to_le_bytes());
    out
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        if self.0.len() < n {
            return Err("the engine image is cut short".to_owned());
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }
    fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }
    fn u64(&mut self) -> Result<u64, String> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }
}

/// Reads an image [`encode`] made; `max_memory` bounds the memory it may
/// ask for.
pub(crate) fn decode(bytes: &[u8], max_memory: usize) -> Result<Image<'_>, String> {
    let mut r = Reader(bytes);
    if r.take(4)? != MAGIC {
        return Err("not an image of this engine".to_owned());
    }
    let len = r.u32()? as usize;
    if len > 128 {
        return Err("the image's guest hash is too long".to_owned());
    }
    let guest = String::from_utf8(r.take(len)?.to_vec())
        .map_err(|_| "the image's guest hash is not text".to_owned())?;
    let memory_bytes = usize::try_from(r.u64()?).unwrap_or(usize::MAX);
    if memory_bytes > max_memory {
        return Err(format!(
            "the image holds {memory_bytes} bytes of memory, over this run's limit of {max_memory}"
        ));
    }
    let fuel_used = r.u64()?;
    let count = r.u32()? as usize;
    let last = memory_bytes.div_ceil(PAGE);
    let mut pages = Vec::with_capacity(count.min(last));
    for _ in 0..count {
        let index = r.u32()?;
        if index as usize >= last {
            return Err("the image has a page outside its memory".to_owned());
        }
        pages.push((index, r.take(PAGE)?));
    }
    if !r.0.is_empty() {
        return Err("the engine image has bytes after its end".to_owned());
    }
    Ok(Image {
        guest,
        memory_bytes,
        fuel_used,
        pages,
    })
}

impl Image<'_> {
    /// Makes `memory`, the boot image grown to [`Image::memory_bytes`],
    /// the memory the image was made from.
    pub(crate) fn apply(&self, memory: &mut [u8]) {
        for (index, delta) in &self.pages {
            let start = *index as usize * PAGE;
            let Some(page) = memory.get_mut(start..(start + PAGE).min(self.memory_bytes)) else {
                continue;
            };
            for (x, d) in page.iter_mut().zip(delta.iter()) {
                *x ^= d;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_image_gives_back_the_memory_it_was_made_from() {
        let boot: Vec<u8> = (0..3 * PAGE).map(|i| (i % 251) as u8).collect();
        let mut memory = boot.clone();
        memory[5] = 9;
        memory[2 * PAGE + 7] ^= 0xff;
        memory.extend(std::iter::repeat_n(0, PAGE));
        memory.extend((0..PAGE + 10).map(|i| (i % 7) as u8));
        let bytes = encode("abc", &boot, &memory, 42);
        let image = decode(&bytes, 1 << 20).unwrap();
        assert_eq!((image.guest.as_str(), image.fuel_used), ("abc", 42));
        assert_eq!(image.pages.len(), 4, "two changed, two grown, one zero");
        let mut back = boot.clone();
        back.resize(image.memory_bytes, 0);
        image.apply(&mut back);
        assert_eq!(back, memory);
    }

    #[test]
    fn images_that_do_not_fit_are_refused() {
        let boot = vec![0u8; PAGE];
        let bytes = encode("abc", &boot, &[1u8; 2 * PAGE], 0);
        assert!(decode(&bytes, PAGE)
            .unwrap_err()
            .contains("over this run's limit"));
        assert!(decode(&bytes[..bytes.len() - 1], 1 << 20).is_err());
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(decode(&longer, 1 << 20).is_err());
        assert!(decode(b"nope", 1 << 20).is_err());
    }
}
