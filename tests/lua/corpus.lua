-- corpus.lua: a text corpus made on the spot, for tests that must not depend on a file outside
-- the tree (data/ is git-ignored: a GPU machine that gets a copy of the working tree has no
-- data/kjv.txt). Seeded pseudo-English: sentences of 4 to 14 words drawn from a fixed list with
-- Zipf-like frequencies, capitalised, ending in a period, lines of about 72 characters. The same
-- seed and size give the same bytes on every machine (integer arithmetic only). A byte-level GPT
-- learns it quickly, as it does the KJV: its losses fall well within 20 steps.
-- Load with dofile("tests/lua/corpus.lua"); corpus.write(path, bytes, seed) writes the file and
-- returns path.
local corpus = {}

local WORDS = {
   "the", "of", "and", "to", "in", "a", "is", "that", "for", "it", "as", "was", "with", "be", "by",
   "on", "not", "he", "this", "are", "or", "his", "from", "at", "which", "but", "have", "an",
   "they", "you", "were", "their", "one", "all", "we", "can", "her", "has", "there", "been",
   "if", "more", "when", "will", "would", "who", "so", "no", "she", "other", "its", "may",
   "these", "what", "them", "than", "some", "him", "time", "into", "only", "do", "two", "could",
   "new", "first", "then", "any", "like", "my", "now", "over", "such", "our", "man", "me", "even",
   "most", "made", "after", "also", "did", "many", "before", "must", "through", "back", "years",
   "where", "much", "your", "way", "well", "down", "should", "because", "each", "just", "those",
   "people", "how", "too", "little", "state", "good", "very", "make", "world", "still", "own",
   "see", "men", "work", "long", "get", "here", "between", "both", "life", "being", "under",
   "never", "day", "same", "another", "know", "while", "last", "might", "us", "great", "old",
   "year", "off", "come", "since", "against", "go", "came", "right", "used", "take", "three",
   "light", "water", "earth", "river", "stone", "bread", "house", "field", "city", "king",
}

-- a 31-bit linear congruential generator's next state
local function lcg(state) return (state * 1103515245 + 12345) % 2147483648 end

function corpus.write(path, bytes, seed)
   local state = seed or 1
   local function below(n) -- an integer in [0, n)
      state = lcg(state)
      return math.floor(state / 2147483648 * n)
   end
   local function word() -- Zipf-like: the square of a uniform index favours the first words
      local i = below(#WORDS)
      return WORDS[math.floor(i * i / #WORDS) + 1]
   end
   local f = assert(io.open(path, "wb"))
   local written, line, parts = 0, 0, {}
   while written < bytes do
      local n = 4 + below(11)
      for k = 1, n do
         local w = word()
         if k == 1 then w = w:sub(1, 1):upper() .. w:sub(2) end
         if k == n then w = w .. "." elseif below(9) == 0 then w = w .. "," end
         if line + #w + 1 > 72 then
            parts[#parts + 1] = "\n"
            written, line = written + 1, 0
         elseif line > 0 then
            parts[#parts + 1] = " "
            written, line = written + 1, line + 1
         end
         parts[#parts + 1] = w
         written, line = written + #w, line + #w
      end
      if #parts > 4096 then
         f:write(table.concat(parts))
         parts = {}
      end
   end
   parts[#parts + 1] = "\n"
   f:write(table.concat(parts))
   f:close()
   return path
end

return corpus
