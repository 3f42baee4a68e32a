"""pocketmq's remoting codec against ali-ons' own (npm ``ali-ons`` 3.12.0, a real remoting
client): what ali-ons encodes, pocketmq decodes, and the other way round, with no broker between.

ali-ons' sources read: ``lib/protocol/command/remoting_command.js`` (JSON headers, ext fields
copied as JavaScript values), ``lib/channel.js`` (``beforeRequest``: the ACL signature with
``OnsChannel``), ``lib/mq_client_api.js`` (the ``SEND_MESSAGE_V2`` header, route parsing with
JSON2), ``lib/message/message_decoder.js`` (pull records, offsetMsgId), ``lib/utils/index.js``
(``hashCode``, zlib).
"""

from __future__ import annotations

import zlib

from pocketmq.protocol.remoting import (
    RemotingCommand,
    RemotingFrameDecoder,
    RequestCode,
    ResponseCode,
    encode_command,
    response_to,
)
from pocketmq.protocol.remoting.acl import verify_signature
from pocketmq.protocol.remoting.filters import tags_code
from pocketmq.protocol.remoting.msgid import encode_offset_msg_id
from pocketmq.protocol.remoting.properties import decode_properties
from pocketmq.protocol.remoting.route import BrokerData, QueueData, topic_route_json
from pocketmq.protocol.remoting.stored import StoredMessage, encode_stored
from pocketmq.protocol.remoting.sysflag import COMPRESSED, COMPRESSION_ZLIB, compress_body

from .conftest import run_node

_READ_STDIN = "const input = JSON.parse(require('fs').readFileSync(0, 'utf8'));"

_SIGNED_SEND = (
    _READ_STDIN
    + """
const RemotingCommand = require('ali-ons/lib/protocol/command/remoting_command');
const MessageDecoder = require('ali-ons/lib/message/message_decoder');
const Channel = require('ali-ons/lib/channel');
// the header mq_client_api.js sendMessage builds (numbers and booleans as they are)
const header = {a: 'PG', b: 'TopicTest', c: 'TBW102', d: 4, e: 1, f: 0, g: 1700000000000, h: 0,
  i: MessageDecoder.messageProperties2String({TAGS: 'TagA', KEYS: 'k1 k2'}), j: 0, k: false};
const command = RemotingCommand.createRequestCommand(310, header);
command.body = Buffer.from(input.body, 'utf8');
// Channel#beforeRequest reads only these three getters
Channel.prototype.beforeRequest.call(
  {accessKey: 'ak', secretKey: input.secret, onsChannel: 'ALIYUN'}, command);
const heartbeat = RemotingCommand.createRequestCommand(34, null);
heartbeat.body = Buffer.from(JSON.stringify({clientID: 'c1', producerDataSet: [],
  consumerDataSet: []}));
Channel.prototype.beforeRequest.call(
  {accessKey: 'ak', secretKey: input.secret, onsChannel: 'ALIYUN'}, heartbeat);
console.log(JSON.stringify({frames: [command.encode().toString('hex'),
  heartbeat.encode().toString('hex')], opaque: command.opaque}));
"""
)


def test_a_signed_ali_ons_send_decodes_and_its_signature_verifies() -> None:
    answer = run_node(_SIGNED_SEND, {"body": "Hello pocketmq", "secret": "s3cret"})
    stream = b"".join(bytes.fromhex(frame) for frame in answer["frames"])
    send, heartbeat = RemotingFrameDecoder().feed(stream)
    assert send.code == RequestCode.SEND_MESSAGE_V2
    assert send.opaque == answer["opaque"]
    assert send.version == 121  # ali-ons says 3.4.9
    assert send.body == b"Hello pocketmq"
    fields = send.ext_fields
    assert (fields["a"], fields["b"], fields["e"], fields["g"], fields["k"]) == (
        "PG",
        "TopicTest",
        "1",
        "1700000000000",
        "false",
    )
    assert decode_properties(fields["i"]) == {"TAGS": "TagA", "KEYS": "k1 k2"}
    assert (fields["AccessKey"], fields["OnsChannel"]) == ("ak", "ALIYUN")
    assert verify_signature(fields, send.body, "s3cret")
    assert not verify_signature(fields, send.body, "other")
    assert not verify_signature({**fields, "e": "2"}, send.body, "s3cret")
    assert heartbeat.code == RequestCode.HEART_BEAT
    assert verify_signature(heartbeat.ext_fields, heartbeat.body, "s3cret")  # body signed too


_DECODE_RESPONSE = (
    _READ_STDIN
    + """
const RemotingCommand = require('ali-ons/lib/protocol/command/remoting_command');
const packet = Buffer.from(input.frame, 'hex');
const command = RemotingCommand.decode(packet);
console.log(JSON.stringify({code: command.code, opaque: command.opaque, remark: command.remark,
  isResponse: command.isResponseType, header: command.decodeCommandCustomHeader(),
  body: command.body ? command.body.toString('utf8') : null}));
"""
)


def test_ali_ons_reads_pocketmqs_responses() -> None:
    request = RemotingCommand(RequestCode.SEND_MESSAGE_V2, opaque=41)
    response = response_to(
        request,
        ResponseCode.SUCCESS,
        {"msgId": "7F00000100002A9F0000000000000010", "queueId": "1", "queueOffset": "7"},
    )
    answer = run_node(_DECODE_RESPONSE, {"frame": encode_command(response).hex()})
    assert answer == {  # no remark: left out of the header, undefined in JavaScript
        "code": 0,
        "opaque": 41,
        "isResponse": True,
        "header": {"msgId": "7F00000100002A9F0000000000000010", "queueId": "1", "queueOffset": "7"},
        "body": None,
    }
    error = response_to(request, ResponseCode.TOPIC_NOT_EXIST, remark="no route", body=b"{}")
    answer = run_node(_DECODE_RESPONSE, {"frame": encode_command(error).hex()})
    assert (answer["code"], answer["remark"], answer["body"]) == (17, "no route", "{}")


_DECODE_RECORDS = (
    _READ_STDIN
    + """
const ByteBuffer = require('byte');
const MessageDecoder = require('ali-ons/lib/message/message_decoder');
const messages = MessageDecoder.decodes(ByteBuffer.wrap(Buffer.from(input.body, 'hex')));
console.log(JSON.stringify(messages.map(m => ({topic: m.topic, body: m.body.toString('utf8'),
  properties: m.properties, queueId: m.queueId, queueOffset: m.queueOffset, flag: m.flag,
  commitLogOffset: m.commitLogOffset, msgId: m.msgId, bornHost: m.bornHost,
  storeHost: m.storeHost, reconsumeTimes: m.reconsumeTimes, bodyCRC: m.bodyCRC,
  bornTimestamp: m.bornTimestamp, storeTimestamp: m.storeTimestamp}))));
"""
)


def test_ali_ons_decodes_pull_records_with_their_offset_msg_ids() -> None:
    big = "compressed " * 1000
    messages = [
        StoredMessage(
            "TopicTest",
            b"plain body",
            {"TAGS": "TagA", "KEYS": "k1", "UNIQ_KEY": "0A0000090001"},
            queue_id=2,
            queue_offset=41,
            commit_log_offset=123_456,
            flag=3,
            born_timestamp=1_700_000_000_001,
            born_host="10.0.0.9:53211",
            store_timestamp=1_700_000_000_002,
            store_host="127.0.0.1:10911",
            reconsume_times=1,
        ),
        StoredMessage(
            "%RETRY%G",
            compress_body(big.encode()),
            {"RETRY_TOPIC": "TopicTest"},
            queue_offset=42,
            commit_log_offset=2**40,
            sys_flag=COMPRESSED | COMPRESSION_ZLIB,
            store_host="127.0.0.1:10911",
        ),
    ]
    decoded = run_node(_DECODE_RECORDS, {"body": encode_stored(messages).hex()})
    first, second = decoded
    assert first["msgId"] == encode_offset_msg_id("127.0.0.1:10911", 123_456)
    assert {key: first[key] for key in ("topic", "body", "queueId", "queueOffset", "flag")} == {
        "topic": "TopicTest",
        "body": "plain body",
        "queueId": 2,
        "queueOffset": 41,
        "flag": 3,
    }
    assert (first["bornHost"], first["storeHost"]) == ("10.0.0.9:53211", "127.0.0.1:10911")
    assert (first["bornTimestamp"], first["storeTimestamp"]) == (
        1_700_000_000_001,
        1_700_000_000_002,
    )
    assert first["reconsumeTimes"] == 1
    assert first["bodyCRC"] == zlib.crc32(b"plain body") & 0x7FFFFFFF
    assert first["properties"]["TAGS"] == "TagA"
    assert first["properties"]["UNIQ_KEY"] == "0A0000090001"
    assert second["body"] == big  # inflated by ali-ons (zlib, sysFlag bit 0)
    assert second["topic"] == "%RETRY%G"
    assert second["msgId"] == encode_offset_msg_id("127.0.0.1:10911", 2**40)


_PARSE_ROUTE = (
    _READ_STDIN
    + """
const JSON2 = require('JSON2');
console.log(JSON.stringify(input.routes.map(text => JSON2.parse(text))));
"""
)


def test_ali_ons_parses_both_forms_of_route_json() -> None:
    brokers = [BrokerData("DefaultCluster", "broker-a", {0: "127.0.0.1:10911", 1: "h:2"})]
    queues = [QueueData("broker-a", 4, 4)]
    routes = [topic_route_json(brokers, queues, standard).decode() for standard in (False, True)]
    legacy, standard = run_node(_PARSE_ROUTE, {"routes": routes})
    assert legacy == standard
    assert legacy["brokerDatas"][0]["brokerAddrs"] == {"0": "127.0.0.1:10911", "1": "h:2"}
    assert legacy["queueDatas"][0]["perm"] == 6


_HASH_TAGS = (
    _READ_STDIN
    + """
const utils = require('ali-ons/lib/utils');
const MessageDecoder = require('ali-ons/lib/message/message_decoder');
console.log(JSON.stringify({codes: input.tags.map(t => utils.hashCode(t)),
  properties: MessageDecoder.messageProperties2String({TAGS: 'é', KEYS: 'a b', DELAY: '3'})}));
"""
)


def test_ali_ons_computes_the_same_tags_codes_and_properties() -> None:
    tags = ["TagA", "Aa", "polygenelubricants", "é", "\U0001f600", "订单", "x" * 50]
    answer = run_node(_HASH_TAGS, {"tags": tags})
    assert answer["codes"] == [tags_code(tag) for tag in tags]
    assert decode_properties(answer["properties"]) == {"TAGS": "é", "KEYS": "a b", "DELAY": "3"}
