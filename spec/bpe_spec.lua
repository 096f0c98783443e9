-- bpe_spec.lua: lwopt.bpe and lwopt.bpe_files: training on small texts, lwopt's tokenizer file
-- written and read back (and read by an independent JSON decoder, dkjson), GPT-2's vocab.json
-- and merges.txt and Hugging Face's tokenizer.json read from fixtures written for the spec
-- (spec/fixtures/bpe/: GPT-2's 256 byte tokens in its order, nine made-up merges,
-- <|endoftext|>), each bad file named with its problem, and the whole of data/kjv.txt through
-- a tokenizer of 4096 tokens and back.
local helpers = require("helpers")
local bpe = require("lwopt.bpe")
local dkjson = require("dkjson")

local root = assert(io.popen("pwd")):read("*l")
local FIXTURES = root .. "/spec/fixtures/bpe"

-- The message a call raises.
local function error_of(fn, ...)
   local ok, err = pcall(fn, ...)
   assert.is_false(ok)
   return tostring(err)
end

describe("lwopt.bpe", function()
   local keep = helpers.temp_paths(after_each)
   local function file(text) return keep(helpers.tempfile(text)) end

   it("cuts text into GPT-2's chunks", function()
      assert.same({ "Hello", ",", " world", "'s", "  ", " 12", "\n" },
         bpe.chunks("Hello, world's   12\n"))
      assert.same({}, bpe.chunks(""))
   end)

   it("learns the merges worked out by hand, specials after them, and saves them in rank order",
      function()
         -- "low" once, " low" twice, " lower", " lowest": lo, low, " low", " lowe"
         local t, stats = bpe.train({ file("low low low lower lowest") }, { vocab = 300 })
         assert.same({ 24, 5, 4 }, { stats.bytes, stats.chunks, stats.distinct })
         assert.same({ 261, 4 }, { t.vocab, t.merges })
         assert.same({ { text = "<|endoftext|>", id = 260 } }, t.specials)
         assert.equal(260, t.eot)
         assert.same({ 257, 259, 115, 116, 260 }, t:encode("low lowest<|endoftext|>"))
         assert.equal(" lowe", t:token(259))
         local out = file("")
         t:save(out)
         local text = helpers.slurp(out)
         assert.matches('"merges": %[\n    %[108, 111%],\n    %[256, 119%],\n    %[32, 257%],\n'
            .. '    %[258, 101%]\n  %]\n}\n$', text)
         local doc = dkjson.decode(text)
         assert.same({ "lwopt-bpe", 1, "gpt2", 261 }, { doc.format, doc.version,
            doc.pre_tokenizer, doc.vocab })
         assert.same({ { id = 260, text = "<|endoftext|>" } }, doc.special)
         local back = bpe.load(out)
         assert.same({ 261, 4, 260 }, { back.vocab, back.merges, back.eot })
         assert.same(t:encode("low lowest lower"), back:encode("low lowest lower"))
      end)

   it("encodes special tokens' texts as their ids, or as text when told", function()
      local t = bpe.train({ file("ab ab ab <|x|> ab") }, { vocab = 300, special = { "<|x|>",
         "<|endoftext|>" } })
      local ids = t:encode("ab<|x|><|endoftext|>")
      assert.equal(t.vocab - 2, ids[#ids - 1])
      assert.equal(t.vocab - 1, ids[#ids])
      local plain = t:encode("ab<|x|>", { special = false })
      assert.is_true(#plain > 2)
      assert.equal("ab<|x|>", t:decode(plain))
   end)

   it("round-trips any bytes, invalid UTF-8 and the empty text among them", function()
      local t = bpe.train({ file(("the cat sat on the mat. "):rep(20)) }, { vocab = 280 })
      local all = {}
      for b = 0, 255 do all[#all + 1] = string.char(b) end
      for _, text in ipairs({ "", table.concat(all), "\xff\xfe\xc3(", "the\0mat", " \n\n\t " }) do
         assert.equal(text, t:decode(t:encode(text)))
      end
      local err = error_of(t.decode, t, { 1, t.vocab })
      assert.equal(("tokenizer: (trained): token %d (at 1) is outside its vocabulary [0, %d)")
         :format(t.vocab, t.vocab), err)
   end)

   it("reads GPT-2's vocab.json and merges.txt: its byte order, the merges in rank order",
      function()
         for _, path in ipairs({ FIXTURES .. "/gpt2", FIXTURES .. "/gpt2/vocab.json",
            FIXTURES .. "/gpt2/merges.txt" }) do
            local t = bpe.load(path)
            assert.same({ "gpt2", 266, 9, 265 }, { t.kind, t.vocab, t.merges, t.eot })
            -- GPT-2's own ids: "!" 0, "t" 83, newline (Ċ) 198, space (Ġ) 220
            assert.same({ 0, 83, 198, 220 }, t:encode("!t\n "))
            -- "the": h e (rank 1), no "t he"; " cat": a t (3), c at (4), Ġ cat (5) before Ġ c (8)
            assert.same({ 83, 257, 261 }, t:encode("the cat"))
            assert.same({ 258 }, t:encode(" the"))
            assert.same({ 260, 263 }, t:encode("cater"))
            -- "\n\n" alone is one chunk; before a letter its last newline stands apart
            assert.same({ 262 }, t:encode("\n\n"))
            assert.same({ 64, 198, 198, 65 }, t:encode("a\n\nb"))
            assert.same({ 127, 102, 265 }, t:encode("\xc3\xa9<|endoftext|>"))
            assert.equal(" cat", t:token(261))
            assert.equal("the cat\n\n<|endoftext|>", t:decode({ 83, 257, 261, 262, 265 }))
         end
      end)

   it("reads Hugging Face's tokenizer.json, merges as strings or as pairs", function()
      local t = bpe.load(FIXTURES .. "/hf/tokenizer.json")
      assert.same({ "hf", 266, 9, 265 }, { t.kind, t.vocab, t.merges, t.eot })
      assert.same({ 83, 257, 261, 262, 265 }, t:encode("the cat\n\n<|endoftext|>"))
      local folder = bpe.load(FIXTURES .. "/hf")
      assert.same({ "hf", 266 }, { folder.kind, folder.vocab })
      local doc = dkjson.decode(helpers.slurp(FIXTURES .. "/hf/tokenizer.json"))
      for i, m in ipairs(doc.model.merges) do doc.model.merges[i] = { m:match("^(%S+) (%S+)$") } end
      doc.added_tokens[2] = { id = 300, content = "<pad>", special = true }
      local u = bpe.load(file(dkjson.encode(doc)))
      assert.same({ 301, 9 }, { u.vocab, u.merges })
      assert.same({ 83, 257, 261, 300 }, u:encode("the cat<pad>"))
      -- lwopt's file has bytes as tokens 0-255: GPT-2's order has no such form
      local err = error_of(u.save, u, "/tmp/unused.json")
      assert.matches(": token 0 is not byte 0: this tokenizer (read from hf's files) has no lwopt "
         .. "form", err, 1, true)
   end)

   it("learns from data/kjv.txt 4096 tokens and gives the whole text back", function()
      local kjv = root .. "/data/kjv.txt"
      if helpers.slurp(kjv) == nil then return pending("data/kjv.txt is missing (make data)") end
      local t, stats = bpe.train({ kjv }, { vocab = 4096 })
      assert.same({ 4096, 3839, 4095, 4298239 }, { t.vocab, t.merges, t.eot, stats.bytes })
      local ids, n = t:encode_file(kjv)
      assert.is_true(n > 900000 and n < 1200000, "tokens: " .. n)
      assert.equal(helpers.slurp(kjv), t:decode(ids, n))
      local out = file("")
      t:save(out)
      local back = bpe.load(out)
      local again, m = back:encode_file(kjv)
      assert.equal(n, m)
      local differ = 0
      for i = 0, n - 1 do
         if ids[i] ~= again[i] then differ = differ + 1 end
      end
      assert.equal(0, differ)
   end)
end)

describe("lwopt.bpe's errors", function()
   local keep = helpers.temp_paths(after_each)
   local function file(text) return keep(helpers.tempfile(text)) end

   local GOOD = '{"format": "lwopt-bpe", "version": 1, "pre_tokenizer": "gpt2", "vocab": 258, '
      .. '"special": [{"id": 257, "text": "<|endoftext|>"}], "merges": [[116, 104]]}'

   it("name a missing file, a truncated or malformed lwopt file, and other JSON", function()
      assert.equal(258, bpe.load(file(GOOD)).vocab)
      assert.equal("tokenizer: /nonexistent/t.json: not found", error_of(bpe.load,
         "/nonexistent/t.json"))
      local path = file(GOOD:sub(1, 60))
      assert.matches("^tokenizer: " .. path:gsub("%p", "%%%0") .. ": is not a JSON tokenizer "
         .. "file %(json: .*byte 60", error_of(bpe.load, path))
      local cases = {
         { GOOD:gsub('"version": 1', '"version": 2'), "version 2; this lwopt reads version 1" },
         { GOOD:gsub('"gpt2"', '"llama3"'), 'pre_tokenizer "llama3"; lwopt has "gpt2" only' },
         { GOOD:gsub("%[%[116, 104%]%]", "[[116]]"), "merge 0 is not a pair of token ids" },
         { GOOD:gsub("%[%[116, 104%]%]", "[[116, 300]]"), "merge 0 (116 300 -> 256): token 300 "
           .. "is not in the vocabulary" },
         { GOOD:gsub('"vocab": 258', '"vocab": 300'), "says vocab 300, but its bytes, 1 merges "
           .. "and 1 special tokens make 258 tokens" },
         { GOOD:gsub('"merges": %[%[116, 104%]%]', '"merges": {}'), 'has no "merges" array' },
         { GOOD:gsub('"text": "<|endoftext|>"', '"text": 5'), "special token 0 is not" },
         { '{"format": "other"}', "is neither lwopt's tokenizer file" },
         { "[1, 2]", "is not a JSON object" },
      }
      for _, case in ipairs(cases) do
         local p = file(case[1])
         assert.equal("tokenizer: " .. p .. ": " .. case[2],
            error_of(bpe.load, p):sub(1, #("tokenizer: " .. p .. ": " .. case[2])))
      end
   end)

   it("name GPT-2's and Hugging Face's files and what in them cannot be read", function()
      local dir = helpers.fresh_path()
      helpers.sh("mkdir -p " .. dir .. " && cp " .. FIXTURES .. "/gpt2/* " .. dir)
      local function with_merges(text)
         local f = assert(io.open(dir .. "/merges.txt", "w"))
         f:write(text)
         f:close()
         return error_of(bpe.load, dir)
      end
      assert.equal("tokenizer: " .. dir .. "/merges.txt: line 3 ('h') is not two tokens separated "
         .. "by a space", with_merges("#version: 0.2\n\196\160 t\nh\n"))
      assert.equal("tokenizer: " .. dir .. "/merges.txt: line 2 ('h x'): 'hx' is not in the "
         .. "vocabulary", with_merges("#version: 0.2\nh x\n"))
      os.remove(dir .. "/merges.txt")
      assert.equal("tokenizer: " .. dir .. "/merges.txt: not found (GPT-2's tokenizer is "
         .. "vocab.json and merges.txt in one folder)", error_of(bpe.load, dir))
      helpers.sh("rm -rf " .. dir)
      local doc = dkjson.decode(helpers.slurp(FIXTURES .. "/hf/tokenizer.json"))
      local function hf_error(change)
         local copy = dkjson.decode(dkjson.encode(doc))
         change(copy)
         local p = file(dkjson.encode(copy))
         return error_of(bpe.load, p):gsub("^tokenizer: " .. p:gsub("%p", "%%%0") .. ": ", "")
      end
      assert.equal('model.type "WordPiece": lwopt reads BPE models only',
         hf_error(function(d) d.model.type = "WordPiece" end))
      assert.equal("model.dropout is 0.1: lwopt's BPE has no such option",
         hf_error(function(d) d.model.dropout = 0.1 end))
      assert.matches("^pre_tokenizer .*: lwopt encodes with GPT%-2's pre%-tokenizer only",
         hf_error(function(d) d.pre_tokenizer.add_prefix_space = true end))
      assert.equal('has a normalizer ("NFC"): lwopt applies none',
         hf_error(function(d) d.normalizer = { type = "NFC" } end))
      assert.equal("the vocabulary has no token for byte 33 (!): a byte-level BPE vocabulary "
         .. "holds all 256", hf_error(function(d) d.model.vocab["!"] = nil end))
      assert.equal("model.merges[2] ('\196\160t hx'): 'hx' is not in the vocabulary",
         hf_error(function(d) d.model.merges[3] = "\196\160t hx" end))
   end)

   it("refuse to train a vocabulary smaller than the bytes and special tokens", function()
      local text = file("some text")
      assert.equal("bpe.train: vocab 200 is smaller than the 256 byte tokens and the 1 special "
         .. "token", error_of(bpe.train, { text }, { vocab = 200 }))
      assert.equal("bpe.train: vocab 257 is smaller than the 256 byte tokens and the 2 special "
         .. "tokens", error_of(bpe.train, { text }, { vocab = 257, special = { "<a>", "<b>" } }))
      assert.matches("^bpe%.train: files: cannot open /nonexistent/x%.txt: No such file",
         error_of(bpe.train, { "/nonexistent/x.txt" }, { vocab = 300 }))
   end)
end)
