-- sampling.lua: text from a trained GPT (lw.nn.GPT), as the recipe prints at the end of training
-- and `lwopt sample` prints from a checkpoint: each next token drawn from the model's
-- distribution at a temperature (optionally among the k likeliest) by a seeded 31-bit linear
-- congruential generator, so the same model, prompt and settings give the same text anywhere.
-- Bytes are sampled among those that occur in the training text; token ids are printed as ids,
-- or decoded with a tokenizer (lwopt.tokenizer, lwopt.bpe). It does not encode text into
-- tokens.
local ffi = require("ffi")
local errors = require("lwopt.errors")

local sampling = {}

-- What the recipe samples with unless told otherwise.
sampling.TEMPERATURE = 0.8
sampling.COUNT = 200
sampling.BYTE_PROMPT = "And God said"
-- Token data's prompt: the first of the validation tokens, this many (at most the sequence).
sampling.PROMPT_TOKENS = 8

-- The next state of a 31-bit linear congruential generator.
local function lcg(state) return (state * 1103515245 + 12345) % 2147483648 end

-- The set ({ [byte] = true }) of the bytes that occur in a byte dataset's training split
-- (lw.data): an untrained byte's small probability is noise, not text.
function sampling.bytes_seen(data)
   local seen = {}
   for i = 0, data.n_train - 1 do seen[data.bytes[i]] = true end
   return seen
end

-- A set of bytes as 64 hex digits, byte b the bit b % 4 of digit b / 4 (what a checkpoint
-- records), and back; nil for text that is not such digits.
function sampling.bytes_mask(set)
   local digits = {}
   for d = 0, 63 do
      local v = 0
      for b = 0, 3 do
         if set[d * 4 + b] then v = v + 2 ^ b end
      end
      digits[d + 1] = ("%x"):format(v)
   end
   return table.concat(digits)
end

function sampling.bytes_of_mask(mask)
   if type(mask) ~= "string" or not mask:match("^" .. ("%x"):rep(64) .. "$") then return nil end
   local set = {}
   for d = 0, 63 do
      local v = tonumber(mask:sub(d + 1, d + 1), 16)
      for b = 0, 3 do
         if math.floor(v / 2 ^ b) % 2 == 1 then set[d * 4 + b] = true end
      end
   end
   return set
end

-- Token ids from text: integers below vocab separated by commas or spaces ("1,2,3", "1 2 3").
-- Errors name the flag (e.g. "--prompt-ids") and the word that is not such an id.
function sampling.parse_ids(text, vocab, flag)
   local ids = {}
   for word in text:gmatch("[^,%s]+") do
      local id = tonumber(word)
      if id == nil or id ~= math.floor(id) or id < 0 or id >= vocab then
         errors.fail(flag, "expected token ids below the vocabulary (%d), separated by commas "
            .. "or spaces; got '%s'", vocab, word)
      end
      ids[#ids + 1] = id
   end
   if #ids == 0 then errors.fail(flag, "no token ids in '%s'", text) end
   return ids
end

-- The smallest of the k largest of weights[0 .. n-1] (a min-heap of the k largest).
local function kth_largest(weights, n, k)
   local heap, size = {}, 0
   local function sift_down(i)
      while true do
         local l, r, m = 2 * i, 2 * i + 1, i
         if l <= size and heap[l] < heap[m] then m = l end
         if r <= size and heap[r] < heap[m] then m = r end
         if m == i then return end
         heap[i], heap[m] = heap[m], heap[i]
         i = m
      end
   end
   for id = 0, n - 1 do
      local w = weights[id]
      if size < k then
         size = size + 1
         heap[size] = w
         local i = size
         while i > 1 and heap[math.floor(i / 2)] > heap[i] do
            local p = math.floor(i / 2)
            heap[i], heap[p] = heap[p], heap[i]
            i = p
         end
      elseif w > heap[1] then
         heap[1] = w
         sift_down(1)
      end
   end
   return heap[1]
end

-- Generates count ids after the prompt (a list of ids, at least one) with model (its last
-- forward's row read by model:next_probs; the context is the last o.seq ids). o: seq, seed,
-- vocab (ids considered: [0, vocab), never the model's padded rows), allowed (nil, or a set of
-- the ids that may be drawn), temperature (default 0.8), top_k (nil: every id; else the k
-- likeliest, ties with the k-th kept). Each id is drawn with probability proportional to
-- p ^ (1 / temperature). Returns the list of generated ids.
function sampling.generate(model, prompt, count, o)
   if #prompt < 1 then
      errors.misuse("sampling.generate", "the prompt needs at least one token")
   end
   local seq, vocab, allowed = o.seq, o.vocab, o.allowed
   local power = 1 / (o.temperature or sampling.TEMPERATURE)
   local tokens = ffi.new("int32_t[?]", seq)
   local weights = ffi.new("double[?]", vocab)
   local context = { unpack(prompt) }
   local out = {}
   local state = o.seed
   for n = 1, count do
      local start = math.max(1, #context - seq + 1)
      local len = #context - start + 1
      for i = 0, seq - 1 do tokens[i] = i < len and context[start + i] or 0 end
      model:forward(tokens, nil, 1, seq)
      local p = model:next_probs(len - 1)
      for id = 0, vocab - 1 do
         weights[id] = (allowed == nil or allowed[id]) and p[id] ^ power or 0
      end
      if o.top_k and o.top_k < vocab then
         local least = kth_largest(weights, vocab, o.top_k)
         for id = 0, vocab - 1 do
            if weights[id] < least then weights[id] = 0 end
         end
      end
      local total = 0
      for id = 0, vocab - 1 do total = total + weights[id] end
      state = lcg(state)
      local r, pick = state / 2147483648 * total, vocab - 1
      for id = 0, vocab - 1 do
         r = r - weights[id]
         if r <= 0 then
            pick = id
            break
         end
      end
      context[#context + 1] = pick
      out[n] = pick
   end
   return out
end

-- The prompt of token data by default: its first validation tokens, and those words for the
-- sample's heading.
function sampling.default_token_prompt(data, seq)
   local ids = data:val_tokens(math.min(sampling.PROMPT_TOKENS, seq))
   return ids, ("the first %d validation tokens"):format(#ids)
end

-- The sample the recipe prints: its heading line and text. s: kind ("bytes" | "tokens"),
-- prompt (bytes: a string; tokens: a list of ids), prompt_from (tokens: words for where the
-- prompt came from; default "N tokens given"), count (bytes or tokens to generate), seq, seed,
-- vocab, allowed (bytes: the set that may be drawn), temperature, top_k, tokenizer (tokens:
-- lwopt.tokenizer's or lwopt.bpe's, to decode: the prompt's text, '|', the generated text;
-- without one the ids are printed, the prompt's, then '|', then the generated ones).
function sampling.text(model, s)
   local o = { seq = s.seq, seed = s.seed, vocab = s.vocab, allowed = s.allowed,
               temperature = s.temperature, top_k = s.top_k }
   if s.kind ~= "tokens" then
      local prompt = { s.prompt:byte(1, -1) }
      local out = sampling.generate(model, prompt, s.count, o)
      local chars = {}
      for i, b in ipairs(out) do chars[i] = string.char(b) end
      return "sample:\n" .. s.prompt .. table.concat(chars)
   end
   local from = s.prompt_from or ("%d tokens given"):format(#s.prompt)
   local out = sampling.generate(model, s.prompt, s.count, o)
   if s.tokenizer then
      return ("sample (decoded with %s; prompt: %s, then '|'):\n"):format(
         s.tokenizer.path:match("[^/]*$"), from) .. s.tokenizer:decode(s.prompt) .. "|"
         .. s.tokenizer:decode(out)
   end
   return ("sample (token ids; no tokenizer for token shards; prompt: %s, then '|'):\n"):format(
      from) .. table.concat(s.prompt, " ") .. " | " .. table.concat(out, " ")
end

return sampling
