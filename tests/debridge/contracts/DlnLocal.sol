// SPDX-License-Identifier: Apache-2.0
pragma solidity 0.8.24;

// A compact deBridge DLN for the tests (issue 46): DLN's published interfaces and
// shapes (debridge-finance/dln-contracts: DlnSource, DlnDestination, DlnOrderLib),
// reimplemented small because no registry package ships DLN's compiled contracts.
// Kept:
//   DlnSource.createOrder(OrderCreation, affiliateFee, referralCode, permitEnvelope)
//     payable (globalFixedNativeFee) → orderId; the give amount is locked in the source;
//     CreatedOrder(Order, orderId, affiliateFee, nativeFixFee, percentFee, referralCode,
//     metadata); giveOrders(orderId) status NotSet/Created/ClaimedUnlock/ClaimedCancel;
//     per-maker makerOrderNonce in the Order, so the id is known only from the event.
//   DlnDestination.fulfillOrder(Order, fulFillAmount, orderId, permitEnvelope,
//     unlockAuthority) by a taker: takeAmount of takeToken from the taker to receiverDst,
//     once; FulfilledOrder(Order, orderId, sender, unlockAuthority); takeOrders(orderId)
//     status NotSet/Fulfilled/SentUnlock/SentOrderCancel.
//   DlnDestination.sendEvmOrderCancel(Order, cancelBeneficiary, executionFee) by the
//     order's orderAuthorityAddressDst, only while unfulfilled; the source's
//     claimCancel then refunds giveAmount: ClaimedOrderCancel(orderId, beneficiary,
//     paidAmount, giveTokenAddress).
// Simplified: the deBridge messaging layer between the chains is a trusted relayer
// address (`messenger`, set at deploy) that calls claimUnlock/claimCancel on the
// source; orderId is keccak256(abi.encode(order)), not DLN's packed encodeOrder;
// no percent fee, affiliate fee, permits, patches or external calls.

contract TestToken {
    string public name;
    string public symbol;
    uint8 public constant decimals = 6;
    uint256 public totalSupply;
    address public owner;
    mapping(address => uint256) public balanceOf;
    mapping(address => mapping(address => uint256)) public allowance;

    event Transfer(address indexed from, address indexed to, uint256 value);
    event Approval(address indexed owner, address indexed spender, uint256 value);

    constructor() { owner = msg.sender; name = "Test USDC"; symbol = "USDC"; }

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

library DlnOrderLib {
    struct OrderCreation {
        address giveTokenAddress;
        uint256 giveAmount;
        bytes takeTokenAddress;
        uint256 takeAmount;
        uint256 takeChainId;
        bytes receiverDst;
        address givePatchAuthoritySrc;
        bytes orderAuthorityAddressDst;
        bytes allowedTakerDst;
        bytes externalCall;
        bytes allowedCancelBeneficiarySrc;
    }

    struct Order {
        uint64 makerOrderNonce;
        bytes makerSrc;
        uint256 giveChainId;
        bytes giveTokenAddress;
        uint256 giveAmount;
        uint256 takeChainId;
        bytes takeTokenAddress;
        uint256 takeAmount;
        bytes receiverDst;
        bytes givePatchAuthoritySrc;
        bytes orderAuthorityAddressDst;
        bytes allowedTakerDst;
        bytes allowedCancelBeneficiarySrc;
        bytes externalCall;
    }

    function getOrderId(Order memory order) internal pure returns (bytes32) {
        return keccak256(abi.encode(order));
    }

    function toAddress(bytes memory b) internal pure returns (address a) {
        require(b.length == 20, "not an address");
        assembly { a := shr(96, mload(add(b, 32))) }
    }
}

contract DlnSource {
    enum OrderGiveStatus { NotSet, Created, ClaimedUnlock, ClaimedCancel }

    struct GiveOrderState {
        OrderGiveStatus status;
        uint160 giveTokenAddress;
        uint88 nativeFixFee;
        uint48 takeChainId;
        uint208 percentFee;
        uint256 giveAmount;
    }

    uint88 public globalFixedNativeFee;
    address public messenger; // stands in for deBridge's gate + DlnDestination's messages
    mapping(address => uint256) public masterNonce;
    mapping(bytes32 => GiveOrderState) public giveOrders;
    mapping(bytes32 => address) public cancelBeneficiaryOf;

    event CreatedOrder(
        DlnOrderLib.Order order, bytes32 orderId, bytes affiliateFee, uint256 nativeFixFee,
        uint256 percentFee, uint32 referralCode, bytes metadata
    );
    event ClaimedUnlock(bytes32 orderId, address beneficiary, uint256 giveAmount, address giveTokenAddress);
    event ClaimedOrderCancel(bytes32 orderId, address beneficiary, uint256 paidAmount, address giveTokenAddress);

    constructor(uint88 fixedNativeFee, address _messenger) {
        globalFixedNativeFee = fixedNativeFee;
        messenger = _messenger;
    }

    function createOrder(
        DlnOrderLib.OrderCreation calldata c,
        bytes calldata affiliateFee,
        uint32 referralCode,
        bytes calldata permitEnvelope
    ) external payable returns (bytes32 orderId) {
        require(msg.value == globalFixedNativeFee, "WrongFixedFee");
        require(c.giveAmount > 0 && c.takeAmount > 0, "WrongArgument");
        require(c.takeChainId != block.chainid, "WrongChain");
        require(c.receiverDst.length == 20 && c.orderAuthorityAddressDst.length == 20, "WrongAddressLength");
        require(affiliateFee.length == 0 && permitEnvelope.length == 0 && c.externalCall.length == 0, "NotSupported");
        require(TestToken(c.giveTokenAddress).transferFrom(msg.sender, address(this), c.giveAmount), "transfer");
        DlnOrderLib.Order memory order = DlnOrderLib.Order({
            makerOrderNonce: uint64(masterNonce[msg.sender]++),
            makerSrc: abi.encodePacked(msg.sender),
            giveChainId: block.chainid,
            giveTokenAddress: abi.encodePacked(c.giveTokenAddress),
            giveAmount: c.giveAmount,
            takeChainId: c.takeChainId,
            takeTokenAddress: c.takeTokenAddress,
            takeAmount: c.takeAmount,
            receiverDst: c.receiverDst,
            givePatchAuthoritySrc: abi.encodePacked(c.givePatchAuthoritySrc),
            orderAuthorityAddressDst: c.orderAuthorityAddressDst,
            allowedTakerDst: c.allowedTakerDst,
            allowedCancelBeneficiarySrc: c.allowedCancelBeneficiarySrc,
            externalCall: c.externalCall
        });
        orderId = DlnOrderLib.getOrderId(order);
        require(giveOrders[orderId].status == OrderGiveStatus.NotSet, "IncorrectOrderStatus");
        giveOrders[orderId] = GiveOrderState({
            status: OrderGiveStatus.Created,
            giveTokenAddress: uint160(c.giveTokenAddress),
            nativeFixFee: globalFixedNativeFee,
            takeChainId: uint48(c.takeChainId),
            percentFee: 0,
            giveAmount: c.giveAmount
        });
        emit CreatedOrder(order, orderId, affiliateFee, globalFixedNativeFee, 0, referralCode, "");
    }

    /// The taker's unlock, delivered from the destination (by the messenger here).
    function claimUnlock(bytes32 orderId, address beneficiary) external {
        require(msg.sender == messenger, "NotMessenger");
        GiveOrderState storage s = giveOrders[orderId];
        require(s.status == OrderGiveStatus.Created, "IncorrectOrderStatus");
        s.status = OrderGiveStatus.ClaimedUnlock;
        address token = address(s.giveTokenAddress);
        require(TestToken(token).transfer(beneficiary, s.giveAmount), "transfer");
        emit ClaimedUnlock(orderId, beneficiary, s.giveAmount, token);
    }

    /// The cancel sent from the destination (by the messenger here): the give amount back.
    function claimCancel(bytes32 orderId, address beneficiary) external {
        require(msg.sender == messenger, "NotMessenger");
        GiveOrderState storage s = giveOrders[orderId];
        require(s.status == OrderGiveStatus.Created, "IncorrectOrderStatus");
        s.status = OrderGiveStatus.ClaimedCancel;
        cancelBeneficiaryOf[orderId] = beneficiary;
        address token = address(s.giveTokenAddress);
        require(TestToken(token).transfer(beneficiary, s.giveAmount), "transfer");
        emit ClaimedOrderCancel(orderId, beneficiary, s.giveAmount, token);
    }
}

contract DlnDestination {
    enum OrderTakeStatus { NotSet, Fulfilled, SentUnlock, SentOrderCancel }

    struct OrderTakeState {
        OrderTakeStatus status;
        address takerAddress;
        uint256 giveChainId;
    }

    mapping(bytes32 => OrderTakeState) public takeOrders;

    event FulfilledOrder(DlnOrderLib.Order order, bytes32 orderId, address sender, address unlockAuthority);
    event SentOrderUnlock(bytes32 orderId, bytes beneficiary, bytes32 submissionId);
    event SentOrderCancel(DlnOrderLib.Order order, bytes32 orderId, bytes cancelBeneficiary, bytes32 submissionId);

    function fulfillOrder(
        DlnOrderLib.Order memory order,
        uint256 fulFillAmount,
        bytes32 orderId,
        bytes calldata permitEnvelope,
        address unlockAuthority
    ) external payable {
        require(DlnOrderLib.getOrderId(order) == orderId, "MismatchedOrderId");
        require(order.takeChainId == block.chainid, "WrongChain");
        require(fulFillAmount == order.takeAmount, "MismatchTakerAmount");
        require(permitEnvelope.length == 0, "NotSupported");
        if (order.allowedTakerDst.length > 0) {
            require(DlnOrderLib.toAddress(order.allowedTakerDst) == msg.sender, "Unauthorized");
        }
        OrderTakeState storage s = takeOrders[orderId];
        require(s.status == OrderTakeStatus.NotSet, "IncorrectOrderStatus");
        s.status = OrderTakeStatus.Fulfilled;
        s.takerAddress = unlockAuthority;
        s.giveChainId = order.giveChainId;
        address token = DlnOrderLib.toAddress(order.takeTokenAddress);
        address receiver = DlnOrderLib.toAddress(order.receiverDst);
        require(TestToken(token).transferFrom(msg.sender, receiver, order.takeAmount), "transfer");
        emit FulfilledOrder(order, orderId, msg.sender, unlockAuthority);
    }

    function sendEvmUnlock(bytes32 orderId, address beneficiary, uint256 executionFee) external payable {
        require(executionFee == 0, "NotSupported");
        OrderTakeState storage s = takeOrders[orderId];
        require(s.status == OrderTakeStatus.Fulfilled, "IncorrectOrderStatus");
        require(s.takerAddress == msg.sender, "Unauthorized");
        s.status = OrderTakeStatus.SentUnlock;
        emit SentOrderUnlock(orderId, abi.encodePacked(beneficiary), keccak256(abi.encode(orderId, "unlock")));
    }

    function sendEvmOrderCancel(DlnOrderLib.Order memory order, address cancelBeneficiary, uint256 executionFee)
        external payable
    {
        require(executionFee == 0, "NotSupported");
        bytes32 orderId = DlnOrderLib.getOrderId(order);
        require(order.takeChainId == block.chainid, "WrongChain");
        require(DlnOrderLib.toAddress(order.orderAuthorityAddressDst) == msg.sender, "Unauthorized");
        if (order.allowedCancelBeneficiarySrc.length > 0) {
            require(DlnOrderLib.toAddress(order.allowedCancelBeneficiarySrc) == cancelBeneficiary, "WrongBeneficiary");
        }
        OrderTakeState storage s = takeOrders[orderId];
        require(s.status == OrderTakeStatus.NotSet, "IncorrectOrderStatus");
        s.status = OrderTakeStatus.SentOrderCancel;
        s.giveChainId = order.giveChainId;
        emit SentOrderCancel(order, orderId, abi.encodePacked(cancelBeneficiary), keccak256(abi.encode(orderId, "cancel")));
    }
}
