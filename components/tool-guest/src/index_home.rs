//! Where a RAG tool keeps its index: always in a corpus. The host's when the config names one
//! (`corpus = "NAME"`), the instance's own when it names `self` or gives `index_dir` (the key of
//! earlier versions, whose index file moves in once), else one in the instance's memory. One
//! way an index is saved, so that the lease, crash-safe commits and bounds of the host's corpora
//! hold for every tool, and no tool writes an index file of its own.

use std::rc::Rc;

use rag_core::corpus::{Corpus, MemoryCorpus, Shape};

use crate::tool::{BaseEnv, ToolError, corpus_error};

/// The name of the instance's own corpus, kept by the host in its cache.
pub const OWN: &str = "self";

/// The corpus a tool's config keeps its index in: `corpus` when given, else the instance's own
/// when `index_dir` is, else none (the instance's memory). An empty `corpus` is refused.
pub fn configured(corpus: Option<String>, index_dir: Option<&str>) -> Result<Option<String>, String> {
    match corpus {
        Some(c) if c.trim().is_empty() => Err(format!(
            "corpus is empty: name one of the host's [corpora.NAME], \"{OWN}\" (the instance's own), or leave it out"
        )),
        Some(c) => Ok(Some(c)),
        None => Ok(index_dir.map(|_| OWN.to_string())),
    }
}

/// Opens corpus `name` for vectors of `shape`, or one in memory when `name` is `None`; returns
/// it with the name it is kept under. The instance's own corpus that cannot be opened (a host
/// without a cache directory, an unreadable one) is said in the log and replaced by one in
/// memory, as an index that could not be saved used to be: the tool serves, and says why its
/// index will not outlive it. A corpus of the host's that cannot be opened is an error.
pub fn open(
    env: &dyn BaseEnv,
    name: Option<&str>,
    shape: Shape,
) -> Result<(Rc<dyn Corpus>, Option<String>), ToolError> {
    let memory =
        || -> Result<Rc<dyn Corpus>, ToolError> { Ok(Rc::new(MemoryCorpus::new(shape).map_err(corpus_error)?)) };
    match name {
        None => Ok((memory()?, None)),
        Some(OWN) => match env.open_corpus(OWN, shape) {
            Ok(c) => Ok((c, Some(OWN.to_string()))),
            Err(e) => {
                env.log(&format!(
                    "warning: {e}; the index is kept in this instance's memory and built again at the next start"
                ));
                Ok((memory()?, None))
            }
        },
        Some(name) => Ok((env.open_corpus(name, shape)?, Some(name.to_string()))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tool::{Model, TokenSpan};
    use rag_core::corpus::Metric;
    use std::cell::RefCell;

    /// An environment whose host refuses every corpus, as a host without a cache directory
    /// refuses `self`; it keeps its log.
    #[derive(Default)]
    struct NoCorpora(RefCell<Vec<String>>);

    impl BaseEnv for NoCorpora {
        fn model(&self) -> Model {
            Model { id: "m".into(), dimension: 4, max_tokens: 16 }
        }
        fn embed(&self, _: &[String], _: bool) -> Result<Vec<Vec<f32>>, ToolError> {
            unreachable!("not embedded here")
        }
        fn count_tokens(&self, _: &[String]) -> Result<Vec<u32>, ToolError> {
            unreachable!("not counted here")
        }
        fn token_spans(&self, _: &[String]) -> Result<Vec<Vec<TokenSpan>>, ToolError> {
            unreachable!("not tokenised here")
        }
        fn read_file(&self, path: &str, _: u64) -> Result<Vec<u8>, ToolError> {
            Err(ToolError::NotFound(path.into()))
        }
        fn log(&self, line: &str) {
            self.0.borrow_mut().push(line.to_string());
        }
        fn progress(&self, _: &str, _: u64, _: u64, _: &str) {}
        fn open_corpus(&self, name: &str, _: Shape) -> Result<Rc<dyn Corpus>, ToolError> {
            Err(ToolError::Denied(format!("corpus {name}: this host has no cache directory")))
        }
    }

    #[test]
    fn the_own_corpus_falls_back_to_memory_and_says_so_and_a_named_one_does_not() {
        let env = NoCorpora::default();
        let shape = Shape { dimension: 4, metric: Metric::Cosine };
        let (corpus, kept) = open(&env, Some(OWN), shape).unwrap();
        assert_eq!(kept, None);
        // A working corpus in memory, empty, of the shape asked for.
        assert!(corpus.nearest(&[1.0, 0.0, 0.0, 0.0], 3, &rag_core::corpus::Filter::default()).unwrap().is_empty());
        let log = env.0.borrow().join("\n");
        assert!(log.contains("no cache directory") && log.contains("kept in this instance's memory"), "{log}");
        assert!(matches!(open(&env, Some("manual"), shape), Err(ToolError::Denied(_))));
        assert_eq!(open(&env, None, shape).unwrap().1, None);
    }

    #[test]
    fn the_config_names_the_corpus() {
        assert_eq!(configured(Some("m".into()), Some("/index")), Ok(Some("m".into())));
        assert_eq!(configured(None, Some("/index")), Ok(Some(OWN.into())));
        assert_eq!(configured(None, None), Ok(None));
        assert!(configured(Some(" ".into()), None).unwrap_err().contains("\"self\""));
    }
}
