# Sourced by the frozen-reader scripts: the systems read beside a gist checkpoint trained over a frozen
# reader, all by that checkpoint's body (its full-context forward is the reader's own): the trained gists
# (and, added by eval, their untrained start), then at each budget k prefix caching, SnapKV- and
# KVzip-style selection and the hybrid (the first k/2 tokens kept, k/2 more selected by KVzip).
compressed_systems() {  # CKPT K... → sets SYSTEMS, eval's --student / --prefix-k arguments
  local ckpt=$1 k
  shift
  SYSTEMS=(--student "$ckpt")
  for k in "$@"; do
    SYSTEMS+=(--prefix-k "$k"
      --student "$ckpt?compressor=select&num_gist=$k"
      --student "$ckpt?compressor=select&select_scorer=kvzip&num_gist=$k"
      --student "$ckpt?compressor=select&select_scorer=kvzip&keep_item_prefix=$((k / 2))&num_gist=$((k / 2))")
  done
}
