"""Every figure of the load generator on hand-made byte streams and hand-computed numbers.

Pure: bytes with arrival times go through the same parser the client runs on its sockets
(`read_response`), then records go through `compute_metrics`. No sockets, no clocks.
"""

from __future__ import annotations

import json

import pytest

from workflow_scripts.loadgen.metrics import (
    SEND_LAG_LIMIT_PCT,
    compute_metrics,
    itl_gaps_s,
    itl_per_token_s,
    percentile,
    tpot_s,
)
from workflow_scripts.loadgen.records import ERROR, INCOMPLETE, OK, RequestRecord
from workflow_scripts.loadgen.sse import ChunkedDecoder, ProtocolError, read_response

HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data) if data else b"0\r\n\r\n"


def event(obj) -> bytes:
    payload = obj if isinstance(obj, bytes) else json.dumps(obj).encode()
    return chunk(b"data: " + payload + b"\n\n")


def content(text, field="content") -> dict:
    return {"choices": [{"index": 0, "delta": {field: text}, "finish_reason": None}]}


def usage(prompt_tokens: int, completion_tokens: int) -> dict:
    return {
        "choices": [],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens},
    }


def stream_a() -> list[tuple[bytes, float]]:
    """Role chunk, three content chunks (the last carries two tokens), usage, [DONE]."""
    return [
        (
            HEAD
            + event({"choices": [{"index": 0, "delta": {"role": "assistant", "content": None}}]}),
            0.010,
        ),
        (event(content("Hello")), 0.100),
        (event(content(" world")), 0.150),
        (
            event(content("!!"))
            + event({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}),
            0.300,
        ),
        (event(usage(7, 4)), 0.310),
        (event(b"[DONE]"), 0.320),
        (chunk(b""), 0.321),
    ]


def stream_b() -> list[tuple[bytes, float]]:
    return [
        (HEAD, 0.01),
        (event(content("a")), 0.05),
        (event(content("b")), 0.10),
        (event(content("c")) + event(usage(3, 3)), 0.15),
        (event(b"[DONE]") + chunk(b""), 0.20),
    ]


def record_from(packets, sent_s=0.0, index=0) -> RequestRecord:
    record = RequestRecord(index=index, prompt_index=index)
    read_response(record, packets)
    record.sent_s = sent_s
    return record


def test_one_stream_gives_ttft_chunks_tokens_and_e2e():
    r = record_from(stream_a())
    assert r.status == OK
    assert r.ttft_s == 0.100  # the role chunk has no content: it is not the first token
    assert r.chunk_times_s == [0.100, 0.150, 0.300]
    assert (r.prompt_tokens, r.completion_tokens) == (7, 4)
    assert r.token_count_source == "usage"
    assert r.e2e_s == 0.320  # [DONE]
    assert r.finish_reason == "length"
    assert tpot_s(r) == pytest.approx((0.320 - 0.100) / 3)
    assert itl_gaps_s(r) == pytest.approx([0.05, 0.15])
    # 4 tokens in 3 chunks: each gap spread over 4/3 tokens
    assert itl_per_token_s(r) == pytest.approx([0.05 * 3 / 4, 0.15 * 3 / 4])


def test_metrics_of_a_run_by_hand():
    a = record_from(stream_a(), sent_s=0.0, index=0)
    b = record_from(stream_b(), sent_s=0.2, index=1)
    failed = RequestRecord(
        index=2, prompt_index=2, status=ERROR, error="http_500", sent_s=0.1, e2e_s=0.05
    )
    cut = RequestRecord(
        index=3,
        prompt_index=3,
        status=INCOMPLETE,
        sent_s=0.3,
        e2e_s=0.05,
        chunk_times_s=[0.01, 0.02],
    )
    warm = RequestRecord(
        index=-1,
        prompt_index=-1,
        status=OK,
        warmup=True,
        sent_s=-5.0,
        e2e_s=9.0,
        ttft_s=1.0,
        chunk_times_s=[1.0],
        prompt_tokens=100,
        completion_tokens=100,
    )
    m = compute_metrics([warm, a, b, failed, cut], hit_time_cap=True)
    assert (m["completed"], m["errors"], m["incomplete"]) == (2, 1, 1)
    assert m["errors_by_reason"] == {"http_500": 1}
    assert m["hit_time_cap"] is True
    assert m["duration_s"] == pytest.approx(0.4)  # first sent (0.0) -> last finished (0.2+0.2)
    assert (m["prompt_tokens"], m["completion_tokens"]) == (10, 7)
    assert m["prefill_tok_s"] == pytest.approx(10 / 0.4)
    assert m["decode_tok_s"] == pytest.approx(7 / 0.4)
    assert m["req_per_s"] == pytest.approx(2 / 0.4)
    ttft = m["ttft_ms"]
    assert ttft["mean"] == pytest.approx(75)
    assert ttft["median"] == pytest.approx(75)
    assert ttft["p90"] == pytest.approx(95)
    assert ttft["p99"] == pytest.approx(99.5)
    assert m["tpot_ms"]["mean"] == pytest.approx((220 / 3 + 75) / 2)
    itl = m["itl_ms"]  # pooled gaps: 50, 150 (a) and 50, 50 (b)
    assert itl["count"] == 4
    assert itl["mean"] == pytest.approx(75)
    assert itl["median"] == pytest.approx(50)
    assert itl["p90"] == pytest.approx(120)
    assert itl["p99"] == pytest.approx(147)
    assert m["itl_per_token_ms"]["count"] == 4
    assert m["e2el_ms"]["mean"] == pytest.approx(260)
    assert m["e2el_ms"]["median"] == pytest.approx(260)
    assert m["tokens_per_chunk"]["mean"] == pytest.approx((4 / 3 + 1) / 2)
    assert m["content_chunks"] == 6
    assert m["token_count_source"] == "usage"
    assert "goodput" not in m
    assert m["send_lag_ms"] is None  # a closed loop: nothing was scheduled


def test_send_lag_is_sent_minus_scheduled_over_measured_requests():
    lags_ms = [0.0, 2.0, 4.0, 30.0]
    records = [
        RequestRecord(index=i, prompt_index=i, sent_s=1.0 + i + lag / 1000, scheduled_s=1.0 + i)
        for i, lag in enumerate(lags_ms)
    ]
    warm = RequestRecord(index=-1, prompt_index=-1, warmup=True, sent_s=9.0, scheduled_s=0.0)
    lag = compute_metrics([warm, *records])["send_lag_ms"]
    assert lag["p50"] == pytest.approx(3.0)  # halfway between 2 and 4 ms
    assert lag["p99"] == pytest.approx(4.0 + (30.0 - 4.0) * 0.97)  # the warm-up left out


def test_goodput_counts_requests_within_every_slo():
    a = record_from(stream_a(), sent_s=0.0, index=0)  # TTFT 100 ms, TPOT 73.3 ms
    b = record_from(stream_b(), sent_s=0.2, index=1)  # TTFT 50 ms, TPOT 75 ms
    by_ttft = compute_metrics([a, b], slo={"ttft_ms": 80})["goodput"]
    assert by_ttft["good_requests"] == 1
    assert by_ttft["req_per_s"] == pytest.approx(1 / 0.4)
    by_tpot = compute_metrics([a, b], slo={"tpot_ms": 74})["goodput"]
    assert by_tpot["good_requests"] == 1
    both = compute_metrics([a, b], slo={"ttft_ms": 80, "tpot_ms": 74})["goodput"]
    assert both["good_requests"] == 0


def test_percentile_is_linear_between_ranks():
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == pytest.approx(2.5)
    assert percentile([10.0], 99) == 10.0
    assert percentile([0.0, 10.0], 90) == pytest.approx(9.0)


def test_missing_usage_falls_back_to_chunk_count_and_says_so():
    packets = [(HEAD, 0.0)] + [(event(content(t)), 0.1 * (i + 1)) for i, t in enumerate("xyz")]
    packets.append((event(b"[DONE]") + chunk(b""), 0.5))
    r = record_from(packets)
    assert r.status == OK
    assert r.completion_tokens == 3
    assert r.prompt_tokens is None
    assert r.token_count_source == "chunks"
    m = compute_metrics([r, record_from(stream_b(), index=1)])
    assert m["token_count_source"] == {"chunks": 1, "usage": 1}


def test_reasoning_content_and_completions_text_count_as_tokens():
    reasoning = [
        (HEAD, 0.0),
        (event(content("think", "reasoning_content")), 0.2),
        (event(content("answer")), 0.3),
        (event(b"[DONE]") + chunk(b""), 0.4),
    ]
    r = record_from(reasoning)
    assert r.ttft_s == 0.2 and r.content_chunks == 2
    text = [
        (HEAD, 0.0),
        (event({"choices": [{"index": 0, "text": ""}]}), 0.1),
        (event({"choices": [{"index": 0, "text": "hi"}]}), 0.2),
        (event(b"[DONE]") + chunk(b""), 0.3),
    ]
    t = record_from(text)
    assert t.ttft_s == 0.2 and t.content_chunks == 1  # empty text is not a token


def test_any_split_of_the_bytes_gives_the_same_record():
    """Packets can cut anywhere (chunk sizes, CRLFs, SSE lines, JSON): same record."""
    whole = b"".join(data for data, _ in stream_a())
    reference = record_from([(whole, 1.0)])
    for cut in range(1, len(whole)):
        r = record_from([(whole[:cut], 1.0), (whole[cut:], 1.0)])
        assert r == reference, cut
    byte_by_byte = record_from([(whole[i : i + 1], 1.0) for i in range(len(whole))])
    assert byte_by_byte == reference


def test_sse_details_multiline_data_comments_and_crlf():
    multi = b'data: {"choices": [{"index": 0,\r\ndata:  "delta": {"content": "x"}}]}\r\n\r\n'
    packets = [
        (HEAD + chunk(b": keep-alive ping\n\n") + chunk(multi), 0.1),
        (event(b"[DONE]") + chunk(b""), 0.2),
    ]
    r = record_from(packets)
    assert r.status == OK and r.chunk_times_s == [0.1]


def test_bodies_framed_by_length_or_by_close():
    body = b"data: " + json.dumps(content("x")).encode() + b"\n\ndata: [DONE]\n\n"
    by_length = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %d\r\n\r\n"
    r = RequestRecord(0, 0)
    reader = read_response(r, [(by_length % len(body) + body, 0.1)])
    assert r.status == OK and reader.body_done and reader.keep_alive
    by_close = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n"
    finished = {"choices": [{"index": 0, "delta": {"content": "x"}, "finish_reason": "stop"}]}
    body_no_done = b"data: " + json.dumps(finished).encode() + b"\n\n"
    r2 = RequestRecord(0, 0)
    read_response(r2, [(by_close + body_no_done, 0.1)], eof_s=0.3)
    assert r2.status == OK and r2.e2e_s == 0.3 and r2.completion_tokens == 1
    # the same body cut before any finish_reason or [DONE] is not a completed answer
    cut = RequestRecord(0, 0)
    read_response(
        cut, [(by_close + b"data: " + json.dumps(content("x")).encode() + b"\n\n", 0.1)], 0.3
    )
    assert cut.status == ERROR and cut.error == "truncated", cut


def test_a_non_streamed_json_answer_is_one_chunk():
    body = json.dumps(
        {
            "choices": [{"index": 0, "message": {"content": "hi there"}}],
            "usage": {"prompt_tokens": 4, "completion_tokens": 2},
        }
    ).encode()
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
    r = RequestRecord(0, 0)
    read_response(r, [(head % len(body) + body, 0.4)])
    assert r.status == OK and r.ttft_s == 0.4 and r.e2e_s == 0.4 and r.completion_tokens == 2


def test_chunked_decoder_extensions_trailers_and_bad_sizes():
    decoder = ChunkedDecoder()
    out = decoder.feed(b"3;name=v\r\nabc\r\n0\r\nX-Trailer: 1\r\n\r\n")
    assert out == b"abc" and decoder.done
    with pytest.raises(ProtocolError):
        ChunkedDecoder().feed(b"zz\r\nabc\r\n")
    with pytest.raises(ProtocolError):
        ChunkedDecoder().feed(b"2\r\nabc\r\n")


def test_keep_alive_follows_the_response_headers():
    close = b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
    r = RequestRecord(0, 0)
    assert not read_response(r, [(close, 0.1)]).keep_alive
    old = b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n"
    assert not read_response(RequestRecord(0, 0), [(old, 0.1)]).keep_alive
    interim = b"HTTP/1.1 100 Continue\r\n\r\n" + b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"
    reader = read_response(RequestRecord(0, 0), [(interim, 0.1)])
    assert reader.keep_alive and reader.head.status == 200


@pytest.mark.parametrize(
    ("packets", "reason"),
    [
        ([(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 4\r\n\r\nbusy", 0.1)], "http_503"),
        (
            [
                (
                    HEAD + event(content("a")) + event({"error": {"message": "boom", "code": 500}}),
                    0.1,
                )
            ],
            "stream_error",
        ),
        ([(HEAD + event({"object": "error", "message": "vllm style"}), 0.1)], "stream_error"),
        ([(HEAD + chunk(b'error: {"code":500,"message":"llama"}\n\n'), 0.1)], "stream_error"),
        ([(HEAD + chunk(b"event: error\ndata: oops\n\n"), 0.1)], "stream_error"),
        ([(HEAD + event(b"{not json"), 0.1)], "malformed_sse"),
        ([(HEAD + event(b"[1, 2]"), 0.1)], "malformed_sse"),
    ],
)
def test_each_error_kind_from_bytes(packets, reason):
    r = RequestRecord(0, 0)
    read_response(r, packets)
    assert r.status == ERROR
    assert r.error == reason
    assert r.error_detail
    m = compute_metrics([r])
    assert m["completed"] == 0 and m["errors_by_reason"] == {reason: 1}


def test_a_body_cut_short_is_a_connection_error():
    r = RequestRecord(0, 0)
    read_response(r, [(HEAD + event(content("a")), 0.1)], eof_s=0.2)
    assert r.status == ERROR and r.error == "connection"


# -- latency from when a request was due (open-loop arrivals) -----------------------------------


def scheduled(i, due_s, wait_ms, ttft_ms, e2e_ms, status=OK, turn=None):
    """A request due at `due_s`, sent `wait_ms` later, with TTFT and E2E from its send."""
    return RequestRecord(
        index=i,
        prompt_index=i,
        status=status,
        sent_s=due_s + wait_ms / 1000,
        scheduled_s=due_s if turn in (None, 1) else None,
        ttft_s=ttft_ms / 1000,
        e2e_s=e2e_ms / 1000,
        completion_tokens=10,
        turn=turn,
    )


def test_open_loop_latencies_count_from_the_scheduled_time_beside_those_from_the_send():
    """Each request's wait for a free slot (sent_s - scheduled_s) is added to its TTFT and E2E
    from the schedule; the figures from the send stay as they were."""
    waits_ms = [0.0, 100.0, 300.0, 600.0]
    records = [scheduled(i, 0.1 * i, w, ttft_ms=50.0, e2e_ms=200.0) for i, w in enumerate(waits_ms)]
    records.append(scheduled(9, 0.9, 5000.0, 50.0, 200.0, status=ERROR))  # in no latency
    m = compute_metrics(records)
    assert m["ttft_ms"]["median"] == pytest.approx(50.0) and m["ttft_ms"]["p99"] == 50.0
    assert m["e2el_ms"]["median"] == pytest.approx(200.0)
    ttft, e2el = m["ttft_from_schedule_ms"], m["e2el_from_schedule_ms"]
    assert ttft["count"] == e2el["count"] == 4
    assert ttft["mean"] == pytest.approx(50.0 + 250.0)
    assert ttft["median"] == pytest.approx(50.0 + 200.0)  # waits 100 and 300: halfway
    assert ttft["p90"] == pytest.approx(50.0 + 300.0 + 300.0 * 0.7)
    assert ttft["p99"] == pytest.approx(50.0 + 300.0 + 300.0 * 0.97)
    assert e2el["median"] == pytest.approx(200.0 + 200.0)
    assert e2el["p99"] == pytest.approx(200.0 + 300.0 + 300.0 * 0.97)


def test_a_closed_loop_has_no_latency_from_a_schedule_and_no_send_lag_check():
    records = [RequestRecord(i, i, OK, sent_s=0.1 * i, ttft_s=0.05, e2e_s=0.2) for i in range(3)]
    m = compute_metrics(records)
    assert m["ttft_from_schedule_ms"] is None and m["e2el_from_schedule_ms"] is None
    assert m["send_lag_check"] is None


def test_a_conversations_later_turn_counts_from_its_send():
    """Turn 1 starts at the session's arrival; turn 2 has no schedule (it is sent when turn 1
    ended and its think time passed): no wait is added to it."""
    first = scheduled(0, 0.0, 400.0, 50.0, 200.0, turn=1)
    second = scheduled(1, 1.0, 0.0, 70.0, 300.0, turn=2)
    m = compute_metrics([first, second])
    assert m["ttft_from_schedule_ms"]["mean"] == pytest.approx((400.0 + 50.0 + 70.0) / 2)
    assert m["e2el_from_schedule_ms"]["mean"] == pytest.approx((400.0 + 200.0 + 300.0) / 2)


@pytest.mark.parametrize(
    ("waits_ms", "flagged", "p50_pct", "p99_pct"),
    [
        ([0.0] * 10, False, 0.0, 0.0),
        ([4.0] * 10, False, 8.0, 8.0),  # 4 ms against a TTFT of 50: under a tenth
        ([6.0] * 10, True, 12.0, 12.0),  # past a tenth at both
        ([0.0] * 9 + [500.0], True, 0.0, 0.91 * 500.0 * 100 / 50.0),  # the tail alone
    ],
)
def test_the_send_lag_is_flagged_past_a_tenth_of_the_ttft_at_the_median_or_p99(
    waits_ms, flagged, p50_pct, p99_pct
):
    records = [scheduled(i, 0.1 * i, w, ttft_ms=50.0, e2e_ms=200.0) for i, w in enumerate(waits_ms)]
    check = compute_metrics(records)["send_lag_check"]
    assert check["limit_pct_of_ttft"] == SEND_LAG_LIMIT_PCT == 10.0
    assert check["p50_pct_of_ttft"] == pytest.approx(p50_pct)
    assert check["p99_pct_of_ttft"] == pytest.approx(p99_pct)
    assert check["flagged"] is flagged


def test_the_send_lag_check_of_a_run_with_nothing_completed_flags_nothing():
    records = [scheduled(i, 0.1 * i, 900.0, 50.0, 200.0, status=ERROR) for i in range(3)]
    check = compute_metrics(records)["send_lag_check"]
    assert check["p50_pct_of_ttft"] is None and check["p99_pct_of_ttft"] is None
    assert check["flagged"] is False


def test_goodput_under_open_loop_arrivals_counts_ttft_from_the_schedule():
    """Both requests answer in 50 ms from their send; one waited 100 ms for a slot: against a
    TTFT limit of 80 ms only the other is good."""
    records = [scheduled(0, 0.0, 0.0, 50.0, 200.0), scheduled(1, 0.1, 100.0, 50.0, 200.0)]
    goodput = compute_metrics(records, slo={"ttft_ms": 80})["goodput"]
    assert (goodput["good_requests"], goodput["latency_from"]) == (1, "schedule")
    closed = [RequestRecord(i, i, OK, sent_s=0.1 * i, ttft_s=0.05, e2e_s=0.2) for i in range(2)]
    goodput = compute_metrics(closed, slo={"ttft_ms": 80})["goodput"]
    assert (goodput["good_requests"], goodput["latency_from"]) == (2, "send")
