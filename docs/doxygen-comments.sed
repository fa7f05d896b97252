# doxygen-comments.sed — Doxygen's input filter (docs/Doxyfile.in): the
# public headers keep plain C comments, and this makes Doxygen read them as
# documentation, line numbers unchanged:
#   "/* name.h — what it is" on line 1  the file's documentation (@file)
#   "/* ---- section ---- */"           stays a plain comment
#   "/* text" opening a line            documents the declaration after it
#   "code  /* text" after code          documents that member, enumerator,
#                                       typedef or macro (Doxygen's /**<)
#   "e.g. " and "i.e. "                 end no sentence (the brief
#                                       description is the first sentence)
s/\<\(e\.g\|i\.e\)\. /\1.\\ /g
1s|^/\* \([^[:space:]]*\) — |/** @file \1 |
1b
/^[[:space:]]*\/\* -/b
s|^\([[:space:]]*\)/\*\([^*!]\)|\1/**\2|
s|\([^[:space:]/].*[^[:space:]]\)\([[:space:]]*\)/\*\([^*!<]\)|\1\2/**<\3|
