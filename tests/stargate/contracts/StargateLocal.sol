// SPDX-License-Identifier: Apache-2.0
pragma solidity 0.8.24;

// A compact Stargate V2 pool on a compact LayerZero V2 endpoint, for the tests (issue 46).
// Reimplemented because no registry package ships them compiled for a local chain.
// Kept exactly (the shapes qtg reads and writes):
//   IStargate/IOFT: quoteOFT(SendParam) -> (OFTLimit, OFTFeeDetail[], OFTReceipt),
//     quoteSend(SendParam, bool) -> MessagingFee, send(SendParam, MessagingFee, address)
//     payable -> (MessagingReceipt, OFTReceipt); SendParam{dstEid, to, amountLD, minAmountLD,
//     extraOptions, composeMsg, oftCmd}; events OFTSent(guid, dstEid, from, sent, received),
//     OFTReceived(guid, srcEid, to, received).
//   EndpointV2: PacketSent(bytes encodedPacket, bytes options, address sendLibrary) with
//     PacketV1Codec's packet: version u8 | nonce u64 | srcEid u32 | sender b32 | dstEid u32 |
//     receiver b32 | guid b32 | message; guid = keccak256(abi.encodePacked(nonce, srcEid,
//     sender, dstEid, receiver)); verify(Origin, receiver, payloadHash) then a permissionless
//     lzReceive(Origin, receiver, guid, message, extraData) checking payloadHash =
//     keccak256(guid ++ message), clearing it (a replay is refused), PacketDelivered(Origin, receiver).
// Simplified: one DVN address stands in for the DVNs and receive library (verify is its
// call alone); the native fee is a flat amount the endpoint keeps; shared decimals equal
// local decimals (6); the pool is a plain lock/unlock pool with a fee in basis points
// and no credit messaging, no bus (taxi only), no compose, no lzToken.

struct SendParam {
    uint32 dstEid;
    bytes32 to;
    uint256 amountLD;
    uint256 minAmountLD;
    bytes extraOptions;
    bytes composeMsg;
    bytes oftCmd;
}
struct MessagingFee { uint256 nativeFee; uint256 lzTokenFee; }
struct MessagingReceipt { bytes32 guid; uint64 nonce; MessagingFee fee; }
struct OFTLimit { uint256 minAmountLD; uint256 maxAmountLD; }
struct OFTFeeDetail { int256 feeAmountLD; string description; }
struct OFTReceipt { uint256 amountSentLD; uint256 amountReceivedLD; }
struct MessagingParams { uint32 dstEid; bytes32 receiver; bytes message; bytes options; bool payInLzToken; }
struct Origin { uint32 srcEid; bytes32 sender; uint64 nonce; }

interface ILayerZeroReceiver {
    function lzReceive(Origin calldata origin, bytes32 guid, bytes calldata message, address executor,
        bytes calldata extraData) external payable;
}

contract TestUSDT {
    string public constant name = "Test USDT";
    string public constant symbol = "USDT";
    uint8 public constant decimals = 6;
    uint256 public totalSupply;
    address public owner;
    mapping(address => uint256) public balanceOf;
    mapping(address => mapping(address => uint256)) public allowance;

    event Transfer(address indexed from, address indexed to, uint256 value);
    event Approval(address indexed owner, address indexed spender, uint256 value);

    constructor() { owner = msg.sender; }

    function mint(address to, uint256 amount) external returns (bool) {
        require(msg.sender == owner, "owner");
        totalSupply += amount;
        balanceOf[to] += amount;
        emit Transfer(address(0), to, amount);
        return true;
    }

    function approve(address spender, uint256 amount) external returns (bool) {
        allowance[msg.sender][spender] = amount;
        emit Approval(msg.sender, spender, amount);
        return true;
    }

    function transfer(address to, uint256 amount) external returns (bool) {
        _move(msg.sender, to, amount);
        return true;
    }

    function transferFrom(address from, address to, uint256 amount) external returns (bool) {
        uint256 allowed = allowance[from][msg.sender];
        require(allowed >= amount, "allowance");
        if (allowed != type(uint256).max) allowance[from][msg.sender] = allowed - amount;
        _move(from, to, amount);
        return true;
    }

    function _move(address from, address to, uint256 amount) internal {
        require(balanceOf[from] >= amount, "balance");
        balanceOf[from] -= amount;
        balanceOf[to] += amount;
        emit Transfer(from, to, amount);
    }
}

contract EndpointV2Local {
    uint32 public immutable eid;
    address public immutable dvn;
    address public owner;
    uint256 public nativeFee = 1e15;
    // sender => dstEid => receiver => last nonce sent
    mapping(address => mapping(uint32 => mapping(bytes32 => uint64))) public outboundNonce;
    // receiver => srcEid => sender => nonce => payload hash (zero once delivered)
    mapping(address => mapping(uint32 => mapping(bytes32 => mapping(uint64 => bytes32)))) public inboundPayloadHash;
    // receiver => srcEid => sender => nonce => delivered
    mapping(address => mapping(uint32 => mapping(bytes32 => mapping(uint64 => bool)))) public delivered;

    event PacketSent(bytes encodedPayload, bytes options, address sendLibrary);
    event PacketVerified(Origin origin, address receiver, bytes32 payloadHash);
    event PacketDelivered(Origin origin, address receiver);

    constructor(uint32 _eid, address _dvn) { eid = _eid; dvn = _dvn; owner = msg.sender; }

    function setNativeFee(uint256 fee) external { require(msg.sender == owner, "owner"); nativeFee = fee; }

    function quote(MessagingParams calldata, address) external view returns (MessagingFee memory) {
        return MessagingFee(nativeFee, 0);
    }

    function send(MessagingParams calldata p, address refundAddress)
        external payable returns (MessagingReceipt memory receipt)
    {
        require(!p.payInLzToken, "LZ_LzTokenUnavailable");
        require(msg.value >= nativeFee, "LZ_InsufficientFee");
        uint64 nonce = ++outboundNonce[msg.sender][p.dstEid][p.receiver];
        bytes32 sender = bytes32(uint256(uint160(msg.sender)));
        bytes32 guid = keccak256(abi.encodePacked(nonce, eid, sender, p.dstEid, p.receiver));
        emit PacketSent(
            abi.encodePacked(uint8(1), nonce, eid, sender, p.dstEid, p.receiver, guid, p.message),
            p.options, address(this)
        );
        if (msg.value > nativeFee) {
            (bool ok,) = refundAddress.call{value: msg.value - nativeFee}("");
            require(ok, "LZ_RefundFailed");
        }
        receipt = MessagingReceipt(guid, nonce, MessagingFee(nativeFee, 0));
    }

    function verify(Origin calldata origin, address receiver, bytes32 payloadHash) external {
        require(msg.sender == dvn, "LZ_InvalidReceiveLibrary");
        require(!delivered[receiver][origin.srcEid][origin.sender][origin.nonce], "LZ_InvalidNonce");
        inboundPayloadHash[receiver][origin.srcEid][origin.sender][origin.nonce] = payloadHash;
        emit PacketVerified(origin, receiver, payloadHash);
    }

    function lzReceive(Origin calldata origin, address receiver, bytes32 guid, bytes calldata message,
        bytes calldata extraData) external payable
    {
        bytes32 expected = inboundPayloadHash[receiver][origin.srcEid][origin.sender][origin.nonce];
        require(expected != bytes32(0), "LZ_PayloadHashNotFound");
        require(expected == keccak256(abi.encodePacked(guid, message)), "LZ_PayloadHashNotFound");
        delete inboundPayloadHash[receiver][origin.srcEid][origin.sender][origin.nonce];
        delivered[receiver][origin.srcEid][origin.sender][origin.nonce] = true;
        ILayerZeroReceiver(receiver).lzReceive{value: msg.value}(origin, guid, message, msg.sender, extraData);
        emit PacketDelivered(origin, receiver);
    }
}

contract StargatePoolLocal is ILayerZeroReceiver {
    TestUSDT public immutable tokenContract;
    EndpointV2Local public immutable endpoint;
    address public owner;
    uint256 public feeBps;
    mapping(uint32 => bytes32) public peers;

    event OFTSent(bytes32 indexed guid, uint32 dstEid, address indexed fromAddress, uint256 amountSentLD,
        uint256 amountReceivedLD);
    event OFTReceived(bytes32 indexed guid, uint32 srcEid, address indexed toAddress, uint256 amountReceivedLD);

    constructor(address _token, address _endpoint) {
        tokenContract = TestUSDT(_token);
        endpoint = EndpointV2Local(_endpoint);
        owner = msg.sender;
    }

    function token() external view returns (address) { return address(tokenContract); }

    function setPeer(uint32 eid, bytes32 peer) external { require(msg.sender == owner, "owner"); peers[eid] = peer; }

    function setFeeBps(uint256 bps) external { require(msg.sender == owner, "owner"); feeBps = bps; }

    function _receipt(SendParam calldata p) internal view returns (OFTReceipt memory) {
        uint256 fee = p.amountLD * feeBps / 10_000;
        return OFTReceipt(p.amountLD, p.amountLD - fee);
    }

    function quoteOFT(SendParam calldata p)
        external view returns (OFTLimit memory limit, OFTFeeDetail[] memory fees, OFTReceipt memory receipt)
    {
        receipt = _receipt(p);
        limit = OFTLimit(1, tokenContract.balanceOf(address(this)) + type(uint64).max);
        fees = new OFTFeeDetail[](1);
        fees[0] = OFTFeeDetail(-int256(p.amountLD - receipt.amountReceivedLD), "protocol fee");
    }

    function _params(SendParam calldata p, uint256 received) internal view returns (MessagingParams memory) {
        bytes32 peer = peers[p.dstEid];
        require(peer != bytes32(0), "NoPeer");
        require(received <= type(uint64).max, "amount exceeds uint64 (shared decimals)");
        return MessagingParams(p.dstEid, peer, abi.encodePacked(p.to, uint64(received)), p.extraOptions, false);
    }

    function quoteSend(SendParam calldata p, bool payInLzToken) external view returns (MessagingFee memory) {
        require(!payInLzToken, "LzTokenUnavailable");
        return endpoint.quote(_params(p, _receipt(p).amountReceivedLD), address(this));
    }

    function send(SendParam calldata p, MessagingFee calldata fee, address refundAddress)
        external payable returns (MessagingReceipt memory msgReceipt, OFTReceipt memory oftReceipt)
    {
        require(p.composeMsg.length == 0 && p.oftCmd.length == 0, "taxi without compose only");
        require(p.to != bytes32(0), "InvalidReceiver");
        require(fee.lzTokenFee == 0 && msg.value == fee.nativeFee, "InvalidAmount");
        oftReceipt = _receipt(p);
        require(oftReceipt.amountReceivedLD >= p.minAmountLD && oftReceipt.amountReceivedLD > 0, "SlippageExceeded");
        require(tokenContract.transferFrom(msg.sender, address(this), p.amountLD), "transferFrom");
        msgReceipt = endpoint.send{value: msg.value}(_params(p, oftReceipt.amountReceivedLD), refundAddress);
        emit OFTSent(msgReceipt.guid, p.dstEid, msg.sender, oftReceipt.amountSentLD, oftReceipt.amountReceivedLD);
    }

    function lzReceive(Origin calldata origin, bytes32 guid, bytes calldata message, address, bytes calldata)
        external payable override
    {
        require(msg.sender == address(endpoint), "OnlyEndpoint");
        require(peers[origin.srcEid] == origin.sender && origin.sender != bytes32(0), "OnlyPeer");
        require(message.length == 40, "bad message");
        address to = address(uint160(uint256(bytes32(message[0:32]))));
        uint256 amount = uint256(uint64(bytes8(message[32:40])));
        require(tokenContract.transfer(to, amount), "transfer");
        emit OFTReceived(guid, origin.srcEid, to, amount);
    }
}
