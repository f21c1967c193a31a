-- name: InboxEventRecord :execrows
-- Records a received event under its natural id; a duplicate delivery
-- writes nothing (0 rows).
INSERT INTO inbox_events (source, event_id, event_type, occurred_at, payload)
VALUES (@source, @event_id, @event_type, @occurred_at, @payload)
ON CONFLICT (source, event_id) DO NOTHING;

-- name: InboxEventLock :one
SELECT * FROM inbox_events WHERE source = @source AND event_id = @event_id FOR UPDATE;

-- name: InboxEventGet :one
SELECT * FROM inbox_events WHERE source = @source AND event_id = @event_id;

-- name: InboxEventSetApplied :execrows
UPDATE inbox_events SET applied_at = now(), outcome = @outcome::text
WHERE source = @source AND event_id = @event_id AND applied_at IS NULL;

-- name: InboxEventCountUnapplied :one
SELECT count(*) FROM inbox_events WHERE applied_at IS NULL;

-- name: InboxEventNewest :one
-- When the newest recorded event of the source occurred (at the processor),
-- the Unix epoch when none is recorded: the events pass lists the
-- processor's events from there.
SELECT coalesce(max(occurred_at), 'epoch')::timestamptz AS newest FROM inbox_events WHERE source = @source;

-- name: InboxEventListKnown :many
-- Of the given event ids of the source, those recorded already: a replay
-- writes nothing for them.
SELECT event_id FROM inbox_events WHERE source = @source AND event_id = ANY(@event_ids::text[]);
