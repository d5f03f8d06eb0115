"""The relay's Lua scripts: how consumers take deliveries off an outbox (TAKE, TAKE_THESE),
note when they took what a BLMOVE claimed for them (STAMP, CLAIM_CHECK) and put back what
they took and never handed on (UNTAKE); how the router starts the timeout of claims nobody
stamped (SWEEP) and drops revoked deliveries (PURGE); and how clients append to a bounded
inbox (PUSH, GUARDED_PUSH). Each runs in one atomic step on one store's keys. See
the package doc.
"""

from __future__ import annotations

from engine.relay.wire import RING_CARRIES

# The tag of an outbox item, in Lua: the item is a JSON object whose first key is "tag"
# (see wire._delivery_json); the string is read up to its closing quote and decoded only when
# it holds escapes. Anything else is decoded whole.
_TAG_OF = r"""
local function tag_of(item)
    local s, e = string.find(item, '"tag":"', 1, true)
    if s == nil or s > 3 then
        local ok, data = pcall(cjson.decode, item)
        if ok and type(data) == 'table' and type(data.tag) == 'string' then
            return data.tag
        end
        return nil
    end
    local j = e + 1
    while true do
        local k = string.find(item, '["\\]', j)
        if k == nil then
            return nil
        end
        if string.byte(item, k) == 34 then
            local raw = string.sub(item, e + 1, k - 1)
            if string.find(raw, '\\', 1, true) == nil then
                return raw
            end
            local ok, tag = pcall(cjson.decode, '"' .. raw .. '"')
            if ok then
                return tag
            end
            return nil
        end
        j = k + 2
    end
end
"""

# `command` on `key` with `values` as its arguments, 1,000 at a time (Lua's unpack has a
# limit); an even count, so ZADD's score and member pairs stay together.
_IN_CHUNKS = r"""
local function in_chunks(command, key, values)
    for first = 1, #values, 1000 do
        redis.call(command, key, unpack(values, first, math.min(first + 999, #values)))
    end
end
"""

# The server's time as the taken set scores it (seconds, six decimals), in `at`.
_NOW = r"""
local now = redis.call('TIME')
local at = now[1] .. '.' .. string.format('%06d', now[2])
"""

# KEYS: outbox, taken set, the destination's revoked set. ARGV: how many at most.
# Takes deliveries off the outbox and notes when, at the server's clock; drops revoked ones.
TAKE = (
    _TAG_OF
    + _IN_CHUNKS
    + _NOW
    + r"""
local items = redis.call('LPOP', KEYS[1], ARGV[1])
if not items then
    return {}
end
local revoked = redis.call('EXISTS', KEYS[3]) == 1
local kept, scored = {}, {}
for _, item in ipairs(items) do
    local tag = tag_of(item)
    if not (revoked and tag and redis.call('SREM', KEYS[3], tag) == 1) then
        if tag then
            scored[#scored + 1] = at
            scored[#scored + 1] = tag
        end
        kept[#kept + 1] = item
    end
end
in_chunks('ZADD', KEYS[2], scored)
return kept
"""
)

# KEYS: outbox, taken set, the destination's revoked set. ARGV: items read from the outbox.
# Takes those of the given items still in the outbox (a consumer chose them, e.g. by a
# filter of its own), as TAKE does: each removed, its tag noted taken, revoked ones dropped.
# An item another consumer took meanwhile is no longer there and is left out.
TAKE_THESE = (
    _TAG_OF
    + _NOW
    + r"""
local revoked = redis.call('EXISTS', KEYS[3]) == 1
local kept = {}
for _, item in ipairs(ARGV) do
    if redis.call('LREM', KEYS[1], 1, item) == 1 then
        local tag = tag_of(item)
        if not (revoked and tag and redis.call('SREM', KEYS[3], tag) == 1) then
            if tag then
                redis.call('ZADD', KEYS[2], at, tag)
            end
            kept[#kept + 1] = item
        end
    end
end
return kept
"""
)

# KEYS: outbox, taken set, claimed list. ARGV: items TAKE returned (or a BLMOVE claimed
# onto the claimed list), in their order.
# Puts items a consumer took and never handed on (it was closing meanwhile) back at the
# head of the outbox, in their order, and forgets they were taken (or claimed): as if never
# taken, so the destination's next consumer receives them first, in order, not as
# redeliveries.
UNTAKE = (
    _TAG_OF
    + _IN_CHUNKS
    + r"""
local tags = {}
for i = #ARGV, 1, -1 do
    redis.call('LREM', KEYS[3], 1, ARGV[i])
    redis.call('LPUSH', KEYS[1], ARGV[i])
    local tag = tag_of(ARGV[i])
    if tag then
        tags[#tags + 1] = tag
    end
end
in_chunks('ZREM', KEYS[2], tags)
return #ARGV
"""
)

# KEYS: claimed list, taken set. ARGV: items a BLMOVE moved from an outbox to the claimed
# list for this consumer, which it has handed on.
# Starts their delivery timeouts: each still claimed leaves the claimed list and its tag
# enters the taken set at the server's time. One the router's SWEEP stamped meanwhile is
# no longer claimed and is left as it is.
STAMP = (
    _TAG_OF
    + _NOW
    + r"""
local stamped = 0
for _, item in ipairs(ARGV) do
    if redis.call('LREM', KEYS[1], 1, item) == 1 then
        local tag = tag_of(item)
        if tag then
            redis.call('ZADD', KEYS[2], at, tag)
        end
        stamped = stamped + 1
    end
end
return stamped
"""
)

# KEYS: claimed list, taken set, the destination's revoked set. ARGV: one claimed item.
# For a consumer whose BLMOVE claimed an item while the destination had revoked
# deliveries: 1 and the item stamped (as STAMP) when it may be handed on, 0 when it was
# revoked (it leaves the claimed list, never handed on). A claimed item no longer claimed
# was either stamped by the router's SWEEP (its tag is taken: it may go) or removed by
# PURGE (revoked).
CLAIM_CHECK = (
    _TAG_OF
    + _NOW
    + r"""
local item = ARGV[1]
local tag = tag_of(item)
if tag and redis.call('SREM', KEYS[3], tag) == 1 then
    redis.call('LREM', KEYS[1], 1, item)
    return 0
end
if redis.call('LREM', KEYS[1], 1, item) == 1 then
    if tag then
        redis.call('ZADD', KEYS[2], at, tag)
    end
    return 1
end
if tag and redis.call('ZSCORE', KEYS[2], tag) then
    return 1
end
return 0
"""
)

# KEYS: claimed list, taken set. ARGV: how many at most.
# The router's side of STAMP: starts the delivery timeout of the oldest claimed items
# (their consumer may have died before it stamped them) at the server's time, unless a
# consumer stamped them already; they leave the claimed list. How many it looked at.
SWEEP = (
    _TAG_OF
    + _NOW
    + r"""
local items = redis.call('LRANGE', KEYS[1], 0, tonumber(ARGV[1]) - 1)
if #items == 0 then
    return 0
end
redis.call('LTRIM', KEYS[1], #items, -1)
for _, item in ipairs(items) do
    local tag = tag_of(item)
    if tag then
        redis.call('ZADD', KEYS[2], 'NX', at, tag)
    end
end
return #items
"""
)

# KEYS: outbox, the destination's revoked set, claimed list. Removes the revoked items
# from the outbox and from the claimed list (a consumer's BLMOVE may have claimed one: its
# CLAIM_CHECK then finds it gone); how many.
PURGE = (
    _TAG_OF
    + r"""
if redis.call('EXISTS', KEYS[2]) == 0 then
    return 0
end
local removed = 0
for _, key in ipairs({KEYS[1], KEYS[3]}) do
    for _, item in ipairs(redis.call('LRANGE', key, 0, -1)) do
        local tag = tag_of(item)
        if tag and redis.call('SISMEMBER', KEYS[2], tag) == 1 then
            removed = removed + redis.call('LREM', key, 1, item)
        end
    end
end
redis.call('DEL', KEYS[2])
return removed
"""
)


# KEYS[1] the inbox, KEYS[2] its pushed counter (wire.pushed_key)
# ARGV[1] the inbox limit ("" for none); ARGV[2] one letter per command, "b" for a bounded
# one (a publish), "f" for a free one (confirm, reject, other calls); ARGV[3] the channel of
# the store's doorbell ("" for none); ARGV[4...] the commands, in order.
# Appends the commands in order, leaving out the bounded ones when the inbox already holds
# `limit` commands (all of them: one batch, one answer), and counts what it appended on the
# pushed counter in the same atomic step; returns minus how many it left out (0 when none).
# Settlements are never refused: they are what lets the router drain a full inbox.
# Every append to an inbox goes through this script (the package doc, "Rings that carry
# the commands"): with a channel it rings the doorbell with a ring that carries them, when
# they take up to RING_CARRIES bytes, and with an empty ring (read the inbox) otherwise.
PUSH = """
local limit = tonumber(ARGV[1])
local kinds = ARGV[2]
local refuse = limit ~= nil and string.find(kinds, 'b', 1, true) ~= nil
    and redis.call('LLEN', KEYS[1]) >= limit
local pushed, refused, size = {}, 0, 0
for i = 4, #ARGV do
    if refuse and string.byte(kinds, i - 3) == 98 then
        refused = refused + 1
    else
        pushed[#pushed + 1] = ARGV[i]
        size = size + #ARGV[i]
    end
end
if #pushed > 0 then
    for first = 1, #pushed, 1000 do
        redis.call('RPUSH', KEYS[1], unpack(pushed, first, math.min(first + 999, #pushed)))
    end
    local count = redis.call('INCRBY', KEYS[2], #pushed)
    if ARGV[3] ~= '' then
        if size <= RING_CARRIES then
            local ring = {'=' .. count}
            for _, item in ipairs(pushed) do
                ring[#ring + 1] = #item
                ring[#ring + 1] = item
            end
            redis.call('PUBLISH', ARGV[3], table.concat(ring, '\\n'))
        else
            redis.call('PUBLISH', ARGV[3], '')
        end
    end
end
return -refused
""".replace("RING_CARRIES", str(RING_CARRIES))

# KEYS[1] the inbox, KEYS[2] the autoacked list, KEYS[3] the inbox's pushed counter.
# ARGV[1] the last index to read. The router's look at the head of the inbox and the
# autoacked list, and the pushed count they stand at, in one atomic step (reads only).
HEAD = """
return {redis.call('LRANGE', KEYS[1], 0, ARGV[1]), redis.call('LRANGE', KEYS[2], 0, ARGV[1]),
        redis.call('GET', KEYS[3]) or ''}
"""

# KEYS[1] the inbox, KEYS[2] its pushed counter, KEYS[3] a guard key (the caller's: e.g. the
# wiring version). ARGV[1] the value the guard key must hold ("" for none); then PUSH's ARGV.
# PUSH when the guard holds that value, else nothing appended and {the value}: the caller
# decided what to send from a stale reading, reads again and sends again.
GUARDED_PUSH = (
    """
local guard = redis.call('GET', KEYS[3]) or ''
if guard ~= ARGV[1] then
    return {guard}
end
table.remove(ARGV, 1)
"""
    + PUSH
)
