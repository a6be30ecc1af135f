# The components an installed quarry carries in <prefix>/share/quarry/components, named as
# `builtin:NAME` names them: sourced by build.sh (the wheel) and ../install.sh (`make install`).
COMPONENTS=(chapter-rag docx-search embedder-onnx bedrock-kb couchbase-search)
