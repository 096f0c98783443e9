-- cli_data.lua: `lwopt data prepare TEXT... --tokenizer T --out DIR`: text files made token
-- shards in llm.c's format (DIR/NAME_train_000000.bin, ..., DIR/NAME_val_000000.bin) that the
-- recipe's --data reads; the flags, usage and printing. Encoding and writing the shards are the
-- library's (lwopt.bpe, lwopt.tokens.prepare).
local flags = require("lwopt.flags")
local errors = require("lwopt.errors")

local cli_data = {}

local FLAGS = {
   { "tokenizer", "string", nil, "a BPE tokenizer: lwopt's tokenizer file (lwopt tokenizer "
     .. "train), Hugging Face's tokenizer.json, or GPT-2's vocab.json and merges.txt (their "
     .. "folder)" },
   { "out", "string", nil, "the folder of the shards (made if missing)" },
   { "name", "string", nil, "the shards' name: NAME_train_000000.bin (default: the first TEXT's "
     .. "file name without its extension)" },
   { "val-fraction", "number", 0.05, "the last tokens' share that is the validation split, its "
     .. "own shard (0: none)", min = 0, max = 0.5 },
   { "shard-tokens", "size", 1e8, "tokens a shard holds at most (suffixes K, M, G)", min = 1,
     max = 2 ^ 31 - 1 },
   { "overwrite", "bool", false, "replace shards of NAME already in the folder" },
   { "help", "bool", false, "this text" },
}

local USAGE = [[
usage: lwopt data prepare TEXT... --tokenizer T --out DIR [flags]
  encodes the text files (each a document, begun by the end-of-text token <|endoftext|> when the
  tokenizer has one) into token shards in llm.c's format, the last --val-fraction of the tokens
  a validation shard; train on them with lwopt train --data 'DIR/NAME_train_*.bin' --vocab V]]

local function prepare(v, texts, out)
   local bpe, tokens, files = require("lwopt.bpe"), require("lwopt.tokens"), require("lwopt.files")
   local name = v.name or texts[1]:match("([^/]*)$"):gsub("%.[^.]*$", "")
   if name == "" or name:find("[/%*%?%[]") then
      errors.fail(nil, "--name '%s' cannot name shards", name)
   end
   local bytes = 0
   for _, path in ipairs(texts) do
      local kind = files.kind(path)
      if kind ~= "file" then errors.fail(nil, "%s: %s, not a text file", path, kind) end
      local f = assert(io.open(path, "rb"))
      bytes = bytes + f:seek("end")
      f:close()
   end
   local tok = bpe.load(v.tokenizer)
   files.make_dir(v.out)
   local old = tokens.prepared(v.out, name)
   if #old > 0 and not v.overwrite then
      errors.fail(nil, "%s holds %s already (--overwrite replaces the shards of %s)", v.out,
         old[1]:match("[^/]*$"), name)
   end
   local start = require("lwopt").now()
   local r = tokens.prepare(texts, tok, { dir = v.out, name = name,
      val_fraction = v.val_fraction, shard_tokens = v.shard_tokens })
   -- the shards of a larger earlier run, past the ones just written, would join the pattern
   local written = {}
   for _, p in ipairs(r.train) do written[p] = true end
   for _, p in ipairs(r.val) do written[p] = true end
   for _, p in ipairs(old) do
      if not written[p] then files.remove(p) end
   end
   out:write(("tokenizer %s: %s\n"):format(v.tokenizer, tok:describe()))
   out:write(("encoded %d file%s, %d bytes, into %d tokens (%.2f bytes a token) in %.2f s\n")
      :format(#texts, #texts == 1 and "" or "s", bytes, r.tokens, bytes / math.max(r.tokens, 1),
      require("lwopt").now() - start))
   for _, split in ipairs({ "train", "val" }) do
      local list = r[split]
      if #list > 0 then
         out:write(("%-5s %d tokens in %d shard%s: %s%s\n"):format(split, r["n_" .. split],
            #list, #list == 1 and "" or "s", list[1], #list > 1 and " ..." or ""))
      end
   end
   out:write(("train on them: lwopt train --data '%s/%s_train_*.bin' --vocab %d\n"):format(
      v.out, name, tok.vocab))
end

-- `lwopt data prepare ...`: the exit status (2: usage, 1: an error, both in one line).
function cli_data.main(argv, out, err)
   if argv[1] ~= "prepare" then
      if argv[1] == nil or argv[1] == "--help" or argv[1] == "help" then
         out:write(USAGE, "\n", flags.usage(FLAGS), "\n")
         return argv[1] == nil and 2 or 0
      end
      err:write("lwopt: unknown data command '", argv[1], "' (lwopt data --help)\n")
      return 2
   end
   local function usage_error(msg)
      err:write("lwopt data prepare: ", msg, " (lwopt data prepare --help lists the flags)\n")
      return 2
   end
   local v, positional = flags.parse({ unpack(argv, 2) }, FLAGS)
   if v == nil then return usage_error(positional) end
   if v.help then
      out:write(USAGE, "\n", flags.usage(FLAGS), "\n")
      return 0
   end
   if #positional == 0 then return usage_error("needs one or more TEXT files") end
   if v.tokenizer == nil then return usage_error("needs --tokenizer T") end
   if v.out == nil then return usage_error("needs --out DIR") end
   local ok, why = pcall(prepare, v, positional, out)
   if not ok then
      err:write("lwopt data prepare: ", errors.plain(tostring(why)), "\n")
      return 1
   end
   return 0
end

return cli_data
