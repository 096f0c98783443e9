-- cli_data_spec.lua: `lwopt data prepare` as a user runs it on their own text: token shards that
-- lwopt's loader reads back token for token (each file begun by <|endoftext|>, the last tokens
-- the validation shard, several shards when asked), that the recipe trains on, and whose model
-- `lwopt sample` continues a text prompt for, the prompt and the continuation told apart; shards
-- already there kept or replaced; and the errors, each in one line.
local helpers = require("helpers")
local lw = require("lwopt")
local bpe = require("lwopt.bpe")
local C = require("lwopt.C")

local root = assert(io.popen("pwd")):read("*l")
local bin = root .. "/bin/lwopt"

local function lwopt(args) return helpers.sh_apart("cd /tmp && " .. bin .. " " .. args) end

-- Some 20 KB of sentences made of a few words, drawn by a seeded generator.
local function some_text(seed)
   local words = { "the", "cat", "sat", "on", "a", "mat", "and", "dog", "ran", "to", "house",
      "in", "morning", "light", "said", "unto", "them" }
   local out, x = {}, seed
   for i = 1, 4000 do
      x = (x * 1103515245 + 12345) % 2147483648
      out[i] = words[x % #words + 1] .. (x % 11 == 0 and ".\n" or " ")
   end
   return table.concat(out)
end

-- All tokens of the shards a pattern names, in order.
local function read_all(pattern)
   local ffi = require("ffi")
   local paths = lw.tokens.expand(pattern)
   local cpaths = ffi.new("const char*[?]", #paths)
   for i, p in ipairs(paths) do cpaths[i - 1] = p end
   local cell = ffi.new("lw_token_shards*[1]")
   assert.equal(0, C.lib.lw_token_shards_open(cpaths, #paths, cell))
   local s = ffi.gc(cell[0], C.lib.lw_token_shards_free)
   local n = tonumber(C.lib.lw_token_shards_total(s))
   local buf = ffi.new("int32_t[?]", n)
   assert.equal(0, C.lib.lw_token_shards_read(s, 0, n, 0, buf))
   local list = {}
   for i = 0, n - 1 do list[i + 1] = buf[i] end
   return list
end

describe("lwopt data prepare", function()
   local dir
   before_each(function()
      dir = helpers.tempdir()
      for i, name in ipairs({ "a.txt", "b.txt" }) do
         local f = assert(io.open(dir .. "/" .. name, "w"))
         f:write(some_text(i))
         f:close()
      end
      local _, err, status = lwopt("tokenizer train " .. dir .. "/a.txt --vocab 300 --out " .. dir
         .. "/tok.json")
      assert.equal(0, status, err)
   end)
   after_each(function() helpers.sh("rm -rf " .. dir) end)

   it("writes shards the loader reads back: <|endoftext|> and each file's tokens, split at the end",
      function()
         local out, err, status = lwopt("data prepare " .. dir .. "/a.txt " .. dir .. "/b.txt "
            .. "--tokenizer " .. dir .. "/tok.json --out " .. dir .. "/shards --shard-tokens 3000")
         assert.equal(0, status, err)
         local tok = bpe.load(dir .. "/tok.json")
         local want = { tok.eot }
         for _, name in ipairs({ "a.txt", "b.txt" }) do
            if #want > 1 then want[#want + 1] = tok.eot end
            for _, id in ipairs(tok:encode(helpers.slurp(dir .. "/" .. name))) do
               want[#want + 1] = id
            end
         end
         local n_val = math.floor(#want * 0.05)
         local train = read_all(dir .. "/shards/a_train_*.bin")
         local val = read_all(dir .. "/shards/a_val_*.bin")
         assert.equal(#want - n_val, #train)
         assert.equal(n_val, #val)
         for _, id in ipairs(val) do train[#train + 1] = id end
         assert.same(want, train)
         assert.equal(math.ceil((#want - n_val) / 3000), #lw.tokens.expand(dir
            .. "/shards/a_train_*.bin"))
         -- what it says, and the recipe's data loader sees the same split
         assert.matches("^tokenizer " .. dir:gsub("%p", "%%%0") .. "/tok%.json: 300 tokens %(256 "
            .. "bytes, 43 merges, 1 special%)\nencoded 2 files, %d+ bytes, into " .. #want
            .. " tokens %([%d.]+ bytes a token%) in [%d.]+ s\ntrain %d+ tokens in %d shards: .*"
            .. "\nval   " .. n_val .. " tokens in 1 shard: .*/a_val_000000%.bin\ntrain on them: "
            .. "lwopt train %-%-data '.*/shards/a_train_%*%.bin' %-%-vocab 300\n$", out)
         local data = lw.tokens.open(dir .. "/shards/a_train_*.bin", { vocab = 300, seq_len = 32 })
         assert.same({ #want - n_val, n_val }, { data.n_train, data.n_val })
      end)

   it("makes data the recipe trains on, and sample continues a text prompt", function()
      local _, err, status = lwopt("data prepare " .. dir .. "/a.txt --tokenizer " .. dir
         .. "/tok.json --out " .. dir .. "/shards --name mine")
      assert.equal(0, status, err)
      local out
      out, status = helpers.sh("luajit " .. root .. "/recipes/gpt_small.lua --preset tiny "
         .. "--steps 3 --sample 0 --quiet --data '" .. dir .. "/shards/mine_train_*.bin' --vocab "
         .. "300 --ckpt-dir " .. dir .. "/ck")
      assert.equal(0, status, out)
      local said, told
      said, told, status = lwopt("sample " .. dir .. "/ck --prompt 'the cat sat' --tokenizer "
         .. dir .. "/tok.json --tokens 6")
      assert.equal(0, status, told)
      local tok = bpe.load(dir .. "/tok.json")
      local n = #tok:encode("the cat sat")
      assert.matches("^sample %(decoded with tok%.json; prompt: 'the cat sat', " .. n .. " tokens, "
         .. "then '|'%):\nthe cat sat|", said)
   end)

   it("keeps shards already there unless told, and then leaves none of the old ones", function()
      local args = "data prepare " .. dir .. "/a.txt --tokenizer " .. dir .. "/tok.json --out "
         .. dir .. " --shard-tokens 2000"
      local _, err, status = lwopt(args)
      assert.equal(0, status, err)
      assert.is_true(#lw.tokens.expand(dir .. "/a_train_*.bin") > 1)
      _, err, status = lwopt(args)
      assert.equal(1, status)
      assert.equal("lwopt data prepare: " .. dir .. " holds a_train_000000.bin already "
         .. "(--overwrite replaces the shards of a)\n", err)
      _, err, status = lwopt(args:gsub("2000", "1000000") .. " --overwrite --val-fraction 0")
      assert.equal(0, status, err)
      assert.same({ dir .. "/a_train_000000.bin" }, lw.tokens.prepared(dir, "a"))
   end)

   it("names what is wrong in one line", function()
      local tok = dir .. "/tok.json"
      for _, case in ipairs({
         { "data prepare " .. dir .. "/a.txt --out " .. dir, "lwopt data prepare: needs "
           .. "--tokenizer T (lwopt data prepare --help lists the flags)\n", 2 },
         { "data prepare --tokenizer " .. tok .. " --out " .. dir, "needs one or more TEXT", 2 },
         { "data prepare " .. dir .. "/a.txt --tokenizer " .. tok, "needs --out DIR", 2 },
         { "data prepare " .. dir .. "/a.txt --tokenizer " .. tok .. " --out " .. dir
           .. " --val-fraction 0.9", "--val-fraction must be between 0 and 0.5, got 0.9", 2 },
         { "data frobnicate", "lwopt: unknown data command 'frobnicate'", 2 },
         { "data prepare /nonexistent/x.txt --tokenizer " .. tok .. " --out " .. dir,
           "lwopt data prepare: /nonexistent/x.txt: missing, not a text file\n", 1 },
         { "data prepare " .. dir .. "/a.txt --tokenizer " .. dir .. "/a.txt --out " .. dir,
           "lwopt data prepare: tokenizer: " .. dir .. "/a.txt: is not a JSON tokenizer file (",
           1 },
      }) do
         local _, err, status = lwopt(case[1])
         assert.equal(case[3], status, case[1])
         assert.matches(case[2], err, 1, true)
      end
   end)
end)
