// SPDX-License-Identifier: MIT
pragma solidity ^0.8.19;

import {IAny2EVMMessageReceiver} from "@chainlink/contracts-ccip/contracts/interfaces/IAny2EVMMessageReceiver.sol";
import {Client} from "@chainlink/contracts-ccip/contracts/libraries/Client.sol";

/// The destination of the tests' CCIP lane: a contract receiver, so the local
/// router executes the message and emits MessageExecuted (it skips EOAs), which
/// is what qtg's ccip_delivery observe follows. Written out (not CCIPReceiver)
/// because CCIPReceiver imports a versioned OpenZeppelin path npm pack lacks.
contract CCIPTestReceiver is IAny2EVMMessageReceiver {
    event Received(bytes32 messageId, uint256 tokenCount);

    address public immutable router;
    uint256 public received;

    constructor(address router_) {
        router = router_;
    }

    function supportsInterface(bytes4 interfaceId) external pure returns (bool) {
        return interfaceId == type(IAny2EVMMessageReceiver).interfaceId || interfaceId == 0x01ffc9a7;
    }

    function ccipReceive(Client.Any2EVMMessage calldata message) external override {
        require(msg.sender == router, "only router");
        received += 1;
        emit Received(message.messageId, message.destTokenAmounts.length);
    }
}
