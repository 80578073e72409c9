// SPDX-License-Identifier: Apache-2.0
pragma solidity 0.8.24;

// A compact CCTP V1 for the tests (issue 28): Circle's published interfaces,
// message format and attester check, reimplemented because no registry package
// ships Circle's compiled contracts (npm has no @circle-fin/evm-cctp-contracts).
// Kept exactly:
//   Message (V1): version u32 | sourceDomain u32 | destinationDomain u32 | nonce u64 |
//                 sender b32 | recipient b32 | destinationCaller b32 | messageBody
//   BurnMessage:  version u32 | burnToken b32 | mintRecipient b32 | amount u256 | messageSender b32
//   attestation:  65-byte ECDSA signatures over keccak256(message), no prefix, one per
//                 attester up to signatureThreshold, in increasing attester address order
//   usedNonces[keccak256(abi.encodePacked(sourceDomain, nonce))] = 1 once received
// Simplified: the TokenMinter is folded into the TokenMessenger (it still emits
// MintAndWithdraw), no pausing, rescuing or ownership transfer.

interface IMessageHandler {
    function handleReceiveMessage(uint32 sourceDomain, bytes32 sender, bytes calldata messageBody)
        external returns (bool);
}

contract TestUSDC {
    string public constant name = "Test USDC";
    string public constant symbol = "USDC";
    uint8 public constant decimals = 6;
    uint256 public totalSupply;
    address public owner;
    address public minter;
    mapping(address => uint256) public balanceOf;
    mapping(address => mapping(address => uint256)) public allowance;

    event Transfer(address indexed from, address indexed to, uint256 value);
    event Approval(address indexed owner, address indexed spender, uint256 value);

    constructor() { owner = msg.sender; }

    function setMinter(address m) external { require(msg.sender == owner, "owner"); minter = m; }

    function mint(address to, uint256 amount) external returns (bool) {
        require(msg.sender == minter || msg.sender == owner, "minter");
        totalSupply += amount;
        balanceOf[to] += amount;
        emit Transfer(address(0), to, amount);
        return true;
    }

    function burn(uint256 amount) external {
        require(msg.sender == minter, "minter");
        require(balanceOf[msg.sender] >= amount, "burn exceeds balance");
        balanceOf[msg.sender] -= amount;
        totalSupply -= amount;
        emit Transfer(msg.sender, address(0), amount);
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

contract MessageTransmitter {
    uint32 public immutable localDomain;
    uint32 public immutable version = 0;
    uint256 public immutable maxMessageBodySize = 8192;
    uint64 public nextAvailableNonce;
    uint256 public signatureThreshold = 1;
    address public owner;
    mapping(bytes32 => uint256) public usedNonces;
    mapping(address => bool) public isEnabledAttester;
    address[] public enabledAttesters;

    event MessageSent(bytes message);
    event MessageReceived(
        address indexed caller, uint32 sourceDomain, uint64 indexed nonce, bytes32 sender, bytes messageBody
    );
    event AttesterEnabled(address indexed attester);

    constructor(uint32 _localDomain, address attester) {
        localDomain = _localDomain;
        owner = msg.sender;
        isEnabledAttester[attester] = true;
        enabledAttesters.push(attester);
        emit AttesterEnabled(attester);
    }

    function enableAttester(address attester) external {
        require(msg.sender == owner, "owner");
        require(!isEnabledAttester[attester], "Attester already enabled");
        isEnabledAttester[attester] = true;
        enabledAttesters.push(attester);
        emit AttesterEnabled(attester);
    }

    function sendMessage(uint32 destinationDomain, bytes32 recipient, bytes calldata messageBody)
        external returns (uint64)
    {
        require(messageBody.length <= maxMessageBodySize, "Message body exceeds max size");
        require(recipient != bytes32(0), "Recipient must be nonzero");
        uint64 nonce = nextAvailableNonce;
        nextAvailableNonce = nonce + 1;
        bytes memory message = abi.encodePacked(
            version, localDomain, destinationDomain, nonce,
            bytes32(uint256(uint160(msg.sender))), recipient, bytes32(0), messageBody
        );
        emit MessageSent(message);
        return nonce;
    }

    function receiveMessage(bytes calldata message, bytes calldata attestation) external returns (bool) {
        _verifyAttestationSignatures(message, attestation);
        require(message.length >= 116, "Invalid message: too short");
        require(uint32(bytes4(message[8:12])) == localDomain, "Invalid destination domain");
        bytes32 destinationCaller = bytes32(message[84:116]);
        require(
            destinationCaller == bytes32(0) || destinationCaller == bytes32(uint256(uint160(msg.sender))),
            "Invalid caller for message"
        );
        require(uint32(bytes4(message[0:4])) == version, "Invalid message version");
        uint32 sourceDomain = uint32(bytes4(message[4:8]));
        uint64 nonce = uint64(bytes8(message[12:20]));
        bytes32 sourceAndNonce = keccak256(abi.encodePacked(sourceDomain, nonce));
        require(usedNonces[sourceAndNonce] == 0, "Nonce already used");
        usedNonces[sourceAndNonce] = 1;
        bytes32 sender = bytes32(message[20:52]);
        address recipient = address(uint160(uint256(bytes32(message[52:84]))));
        bytes calldata body = message[116:];
        require(IMessageHandler(recipient).handleReceiveMessage(sourceDomain, sender, body), "handleReceiveMessage() failed");
        emit MessageReceived(msg.sender, sourceDomain, nonce, sender, body);
        return true;
    }

    function _verifyAttestationSignatures(bytes calldata message, bytes calldata attestation) internal view {
        require(attestation.length == 65 * signatureThreshold, "Invalid attestation length");
        address latest = address(0);
        bytes32 digest = keccak256(message);
        for (uint256 i = 0; i < signatureThreshold; i++) {
            address signer = _recover(digest, attestation[i * 65:(i + 1) * 65]);
            require(signer > latest, "Invalid signature order or dupe");
            require(isEnabledAttester[signer], "Invalid signature: not attester");
            latest = signer;
        }
    }

    /// OpenZeppelin ECDSA.recover's checks: 65 bytes, low s, v 27/28, no zero signer.
    function _recover(bytes32 digest, bytes calldata sig) internal pure returns (address) {
        bytes32 r = bytes32(sig[0:32]);
        bytes32 s = bytes32(sig[32:64]);
        uint8 v = uint8(sig[64]);
        require(uint256(s) <= 0x7FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF5D576E7357A4501DDFE92F46681B20A0, "ECDSA: invalid signature 's' value");
        require(v == 27 || v == 28, "ECDSA: invalid signature 'v' value");
        address signer = ecrecover(digest, v, r, s);
        require(signer != address(0), "ECDSA: invalid signature");
        return signer;
    }
}

contract TokenMessenger is IMessageHandler {
    uint32 public immutable messageBodyVersion = 0;
    MessageTransmitter public immutable localMessageTransmitter;
    address public owner;
    mapping(uint32 => bytes32) public remoteTokenMessengers;
    // TokenMinter's: keccak256(remoteDomain, remoteToken) → local token
    mapping(bytes32 => address) public remoteTokensToLocalTokens;
    mapping(address => bool) public burnable;

    event DepositForBurn(
        uint64 indexed nonce, address indexed burnToken, uint256 amount, address indexed depositor,
        bytes32 mintRecipient, uint32 destinationDomain, bytes32 destinationTokenMessenger, bytes32 destinationCaller
    );
    event MintAndWithdraw(address indexed mintRecipient, uint256 amount, address indexed mintToken);

    constructor(address transmitter) {
        localMessageTransmitter = MessageTransmitter(transmitter);
        owner = msg.sender;
    }

    function addRemoteTokenMessenger(uint32 domain, bytes32 tokenMessenger) external {
        require(msg.sender == owner, "owner");
        remoteTokenMessengers[domain] = tokenMessenger;
    }

    function linkTokenPair(address localToken, uint32 remoteDomain, bytes32 remoteToken) external {
        require(msg.sender == owner, "owner");
        remoteTokensToLocalTokens[keccak256(abi.encodePacked(remoteDomain, remoteToken))] = localToken;
        burnable[localToken] = true;
    }

    function depositForBurn(uint256 amount, uint32 destinationDomain, bytes32 mintRecipient, address burnToken)
        external returns (uint64 nonce)
    {
        require(amount > 0, "Amount must be nonzero");
        require(mintRecipient != bytes32(0), "Mint recipient must be nonzero");
        bytes32 destinationTokenMessenger = remoteTokenMessengers[destinationDomain];
        require(destinationTokenMessenger != bytes32(0), "No TokenMessenger for domain");
        require(burnable[burnToken], "Burn token not supported");
        require(TestUSDC(burnToken).transferFrom(msg.sender, address(this), amount), "Transfer operation failed");
        TestUSDC(burnToken).burn(amount);
        bytes memory burnMessage = abi.encodePacked(
            messageBodyVersion, bytes32(uint256(uint160(burnToken))), mintRecipient, amount,
            bytes32(uint256(uint160(msg.sender)))
        );
        nonce = localMessageTransmitter.sendMessage(destinationDomain, destinationTokenMessenger, burnMessage);
        emit DepositForBurn(
            nonce, burnToken, amount, msg.sender, mintRecipient, destinationDomain, destinationTokenMessenger, bytes32(0)
        );
    }

    function handleReceiveMessage(uint32 remoteDomain, bytes32 sender, bytes calldata messageBody)
        external override returns (bool)
    {
        require(msg.sender == address(localMessageTransmitter), "Invalid message transmitter");
        require(sender != bytes32(0) && remoteTokenMessengers[remoteDomain] == sender, "Remote TokenMessenger unsupported");
        require(messageBody.length == 132, "Invalid message length");
        require(uint32(bytes4(messageBody[0:4])) == messageBodyVersion, "Invalid message body version");
        bytes32 burnToken = bytes32(messageBody[4:36]);
        address mintRecipient = address(uint160(uint256(bytes32(messageBody[36:68]))));
        uint256 amount = uint256(bytes32(messageBody[68:100]));
        address localToken = remoteTokensToLocalTokens[keccak256(abi.encodePacked(remoteDomain, burnToken))];
        require(localToken != address(0), "Mint token not supported");
        require(TestUSDC(localToken).mint(mintRecipient, amount), "Mint operation failed");
        emit MintAndWithdraw(mintRecipient, amount, localToken);
        return true;
    }
}
