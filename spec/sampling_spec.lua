-- sampling_spec.lua: lwopt.sampling over a stand-in model whose next-token distribution is
-- known: seeded draws, the context window, temperature, top-k, the allowed bytes, the prompt
-- ids' parser, the bytes' record and the printed sample's forms.
local ffi = require("ffi")
local helpers = require("helpers")
local sampling = require("lwopt.sampling")
local tokenizer = require("lwopt.tokenizer")

-- A model of vocab ids whose distribution after any context is p(id) proportional to id + 1
-- (the last id likeliest); it records each forward's tokens and the row asked for.
local function stand_in(vocab)
   local m = { calls = {} }
   local probs = ffi.new("float[?]", vocab)
   local total = vocab * (vocab + 1) / 2
   for id = 0, vocab - 1 do probs[id] = (id + 1) / total end
   function m.forward(_, tokens, targets, b, t)
      assert(targets == nil and b == 1)
      local seen = {}
      for i = 0, t - 1 do seen[i + 1] = tokens[i] end
      m.calls[#m.calls + 1] = { tokens = seen }
   end
   function m.next_probs(_, row)
      m.calls[#m.calls].row = row
      return probs
   end
   return m
end

local function draw(opts, count, prompt)
   local o = { seq = 4, seed = 7, vocab = 10 }
   for k, v in pairs(opts or {}) do o[k] = v end
   return sampling.generate(stand_in(o.vocab), prompt or { 1 }, count or 200, o)
end

local function counts(ids)
   local c = {}
   for _, id in ipairs(ids) do c[id] = (c[id] or 0) + 1 end
   return c
end

describe("lwopt.sampling", function()
   it("draws the same ids for the same seed and others for another", function()
      assert.same(draw(), draw())
      assert.are_not.same(draw(), draw({ seed = 8 }))
      for _, id in ipairs(draw()) do assert.is_true(id >= 0 and id < 10) end
   end)

   it("gives the model the last seq ids as context and reads the row of the newest", function()
      local m = stand_in(10)
      local out = sampling.generate(m, { 3, 4 }, 3, { seq = 4, seed = 1, vocab = 10 })
      assert.same({ 3, 4, 0, 0 }, m.calls[1].tokens)
      assert.equal(1, m.calls[1].row)
      assert.same({ 3, 4, out[1], out[2] }, m.calls[3].tokens)
      assert.equal(3, m.calls[3].row)
      -- a prompt longer than the window: its last 4 ids
      m = stand_in(10)
      sampling.generate(m, { 1, 2, 3, 4, 5, 6 }, 1, { seq = 4, seed = 1, vocab = 10 })
      assert.same({ 3, 4, 5, 6 }, m.calls[1].tokens)
      assert.equal(3, m.calls[1].row)
   end)

   it("sharpens towards the likeliest id at a low temperature, and flattens at a high one",
      function()
         local cold = counts(draw({ temperature = 0.005 }))
         assert.equal(200, cold[9])
         -- at temperature 1 id 0 has p 1/55 (about 4 draws in 200); at 100 nearly 1/10
         local hot = counts(draw({ temperature = 100 }))
         assert.is_true((hot[0] or 0) > 10, tostring(hot[0]))
      end)

   it("draws among the k likeliest with top-k, and only allowed ids when told", function()
      assert.same({ [9] = 200 }, counts(draw({ top_k = 1 })))
      local two = counts(draw({ top_k = 2 }))
      assert.is_true(two[8] > 0 and two[9] > 0 and two[8] + two[9] == 200)
      local allowed = counts(draw({ allowed = { [2] = true, [5] = true } }))
      assert.is_true(allowed[2] > 0 and allowed[5] > 0 and allowed[2] + allowed[5] == 200)
      -- top-k among the allowed ids
      assert.same({ [5] = 200 }, counts(draw({ top_k = 1, allowed = { [2] = true, [5] = true } })))
   end)

   it("reads prompt ids separated by commas or spaces, naming the flag and a bad word", function()
      assert.same({ 1, 2, 3 }, sampling.parse_ids("1,2,3", 10, "--prompt-ids"))
      assert.same({ 1, 2, 9 }, sampling.parse_ids(" 1, 2 9 ", 10, "--prompt-ids"))
      for _, case in ipairs({ { "1,x", "x" }, { "10", "10" }, { "1.5", "1.5" }, { "-1", "-1" } }) do
         local ok, err = pcall(sampling.parse_ids, case[1], 10, "--prompt-ids")
         assert.is_false(ok)
         assert.equal("--prompt-ids: expected token ids below the vocabulary (10), separated by "
            .. "commas or spaces; got '" .. case[2] .. "'", err)
      end
      local ok, err = pcall(sampling.parse_ids, " , ", 10, "--prompt-ids")
      assert.is_false(ok)
      assert.equal("--prompt-ids: no token ids in ' , '", err)
   end)

   it("records a set of bytes as 64 hex digits and reads it back", function()
      local set = { [0] = true, [10] = true, [65] = true, [255] = true }
      local mask = sampling.bytes_mask(set)
      assert.equal(64, #mask)
      assert.same(set, sampling.bytes_of_mask(mask))
      assert.same({}, sampling.bytes_of_mask(("0"):rep(64)))
      assert.is_nil(sampling.bytes_of_mask("xyz"))
      assert.is_nil(sampling.bytes_of_mask(nil))
   end)

   it("finds the bytes of a data set's training split", function()
      local bytes = ffi.new("uint8_t[4]", { 65, 66, 65, 67 })
      assert.same({ [65] = true, [66] = true }, sampling.bytes_seen({ bytes = bytes, n_train = 3 }))
   end)

   it("prints bytes after the prompt, token ids after '|', or decoded text", function()
      local s = { kind = "bytes", prompt = "AB", count = 3, seq = 4, seed = 7, vocab = 256,
                  allowed = { [67] = true } }
      assert.equal("sample:\nABCCC", sampling.text(stand_in(256), s))
      local ids = draw({ vocab = 10 }, 3, { 1, 2 })
      s = { kind = "tokens", prompt = { 1, 2 }, count = 3, seq = 4, seed = 7, vocab = 10 }
      assert.equal("sample (token ids; no tokenizer for token shards; prompt: 2 tokens given, "
         .. "then '|'):\n1 2 | " .. table.concat(ids, " "), sampling.text(stand_in(10), s))
      local pieces = {}
      for id = 0, 9 do pieces[id + 1] = string.char(97 + id) end
      local path = helpers.tokenizer_file(pieces)
      s.tokenizer, s.prompt_from = tokenizer.load(path), "the first 2 validation tokens"
      local text = "bc|"
      for _, id in ipairs(ids) do text = text .. string.char(97 + id) end
      assert.equal("sample (decoded with " .. path:match("[^/]*$") .. "; prompt: the first 2 "
         .. "validation tokens, then '|'):\n" .. text, sampling.text(stand_in(10), s))
      os.remove(path)
   end)
end)
