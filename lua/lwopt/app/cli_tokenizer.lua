-- cli_tokenizer.lua: `lwopt tokenizer train|encode|decode`: a byte-level BPE tokenizer trained
-- on text files and written to lwopt's tokenizer file, text encoded into ids and ids decoded
-- into text, from arguments or stdin; the flags, usage and printing. Training, encoding and the
-- file formats are the library's (lwopt.bpe).
local flags = require("lwopt.flags")
local errors = require("lwopt.errors")

local cli_tokenizer = {}

local TOKENIZER = "lwopt's tokenizer file (tokenizer train --out), Hugging Face's "
   .. "tokenizer.json, or GPT-2's vocab.json and merges.txt (their folder)"

local COMMANDS = {
   train = {
      usage = "usage: lwopt tokenizer train TEXT... --vocab N --out FILE [flags]\n"
         .. "  learns a byte-level BPE tokenizer of N tokens (256 bytes, the merges, the special\n"
         .. "  tokens) from the text files, with GPT-2's pre-tokenizer (docs/tokenizers.md)",
      flags = {
         { "vocab", "int", nil, "tokens wanted: 256 bytes + merges + special tokens", min = 1,
           max = 2 ^ 24 - 1 },
         { "out", "string", nil, "the tokenizer file to write (JSON)" },
         { "special", "string", "<|endoftext|>", "special tokens, separated by spaces ('' for "
           .. "none); they take the last ids" },
         { "min-count", "int", 2, "a pair seen fewer times is never merged", min = 1 },
      },
   },
   encode = {
      usage = "usage: lwopt tokenizer encode --tokenizer T [TEXT...]\n"
         .. "  prints the ids of TEXT (the words joined by spaces), or of stdin without TEXT\n"
         .. "  T: " .. TOKENIZER,
      flags = {
         { "tokenizer", "string", nil, "the tokenizer" },
         { "plain", "bool", false, "special tokens' texts (<|endoftext|>) are text like any "
           .. "other, not their ids" },
      },
   },
   decode = {
      usage = "usage: lwopt tokenizer decode --tokenizer T [ID...]\n"
         .. "  writes the text of the ids (separated by spaces or commas), from stdin without ID\n"
         .. "  T: " .. TOKENIZER,
      flags = { { "tokenizer", "string", nil, "the tokenizer" } },
   },
}
for _, c in pairs(COMMANDS) do c.flags[#c.flags + 1] = { "help", "bool", false, "this text" } end

local USAGE = [[
usage: lwopt tokenizer train|encode|decode [args]
  train TEXT... --vocab N --out FILE   learn a byte-level BPE tokenizer from text files
  encode --tokenizer T [TEXT...]       the ids of TEXT (or stdin)
  decode --tokenizer T [ID...]         the text of the ids (or stdin)
(lwopt tokenizer COMMAND --help: its flags)]]

local function train(v, texts, out)
   local bpe = require("lwopt.bpe")
   if #texts == 0 then return "train needs one or more TEXT files" end
   if v.out == nil then return "train needs --out FILE" end
   if v.vocab == nil then return "train needs --vocab N" end
   local special = {}
   for s in v.special:gmatch("%S+") do special[#special + 1] = s end
   local t, stats = bpe.train(texts, { vocab = v.vocab, special = special,
      min_count = v.min_count, path = v.out })
   t:save(v.out)
   out:write(("trained %s: %s from %d file%s, %d bytes (%d chunks, %d distinct), in %.2f s: "
      .. "%.2f s reading and counting, %.2f s merging (%.0f merges/s)\n"):format(v.out,
      t:describe(), #texts, #texts == 1 and "" or "s", stats.bytes, stats.chunks, stats.distinct,
      stats.count_seconds + stats.merge_seconds, stats.count_seconds, stats.merge_seconds,
      t.merges / math.max(stats.merge_seconds, 1e-6)))
   local asked = v.vocab - 256 - #special
   if t.merges < asked then
      out:write(("note: %d merges of the %d asked: no other pair is seen %d times "
         .. "(--min-count)\n"):format(t.merges, asked, v.min_count))
   end
end

local function encode(v, words, out)
   local t = require("lwopt.bpe").load(v.tokenizer)
   local text = #words > 0 and table.concat(words, " ") or io.stdin:read("*a")
   local ids, n = t:encode_raw(text, not v.plain)
   local parts = {}
   for i = 0, n - 1 do parts[i + 1] = tostring(ids[i]) end
   out:write(table.concat(parts, " "), "\n")
end

local function decode(v, words, out)
   local t = require("lwopt.bpe").load(v.tokenizer)
   local text = #words > 0 and table.concat(words, " ") or io.stdin:read("*a")
   local ids = {}
   for word in text:gmatch("[^,%s]+") do
      local id = tonumber(word)
      if id == nil or id ~= math.floor(id) then
         errors.fail(nil, "'%s' is not a token id", word)
      end
      ids[#ids + 1] = id
   end
   out:write(t:decode(ids))
end

local RUN = { train = train, encode = encode, decode = decode }

-- `lwopt tokenizer COMMAND ...`: the exit status (2: usage, 1: an error, both in one line).
function cli_tokenizer.main(argv, out, err)
   local name = argv[1]
   local c = COMMANDS[name]
   if c == nil then
      if name == nil or name == "--help" or name == "help" then
         out:write(USAGE, "\n")
         return name == nil and 2 or 0
      end
      err:write("lwopt: unknown tokenizer command '", name, "' (lwopt tokenizer --help lists "
         .. "them)\n")
      return 2
   end
   local function usage_error(msg)
      err:write("lwopt tokenizer ", name, ": ", msg, " (lwopt tokenizer ", name,
         " --help lists the flags)\n")
      return 2
   end
   local v, positional = flags.parse({ unpack(argv, 2) }, c.flags)
   if v == nil then return usage_error(positional) end
   if v.help then
      out:write(c.usage, "\n", flags.usage(c.flags), "\n")
      return 0
   end
   if name ~= "train" and v.tokenizer == nil then return usage_error("needs --tokenizer T") end
   local ok, why = pcall(RUN[name], v, positional, out)
   if not ok then
      -- one line: the command's name once, then the problem without the places it passed
      err:write("lwopt tokenizer ", name, ": ",
         errors.plain((tostring(why):gsub("^bpe%.train: ", ""))), "\n")
      return 1
   end
   if why then return usage_error(why) end
   return 0
end

return cli_tokenizer
